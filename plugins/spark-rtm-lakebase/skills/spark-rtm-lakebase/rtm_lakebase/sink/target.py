"""The table a writer writes to: its connection, its statement, and one flush with retries.

Only the flusher thread uses it after ``open()``. A flush is one statement in
autocommit (its own transaction). What happens when it fails depends on what
retrying can change (:func:`~rtm_lakebase.sink.errors.classify`): a lost
connection is reconnected and the flush retried, a deadlock or serialization
failure is retried on the same connection, both with bounded jittered
backoff; anything else fails at once, with the bad row named when one row
causes it.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.adapt import PyFormat, Transformer

from rtm_lakebase.postgres.connection import ConnectionSettings, connect, redact
from rtm_lakebase.postgres.pool import POOL
from rtm_lakebase.sink.diagnosis import FlushDiagnosis
from rtm_lakebase.sink.errors import Failure, FlushAbandoned, SinkConnectionError, SinkError, classify
from rtm_lakebase.sink.metrics import SinkMetrics
from rtm_lakebase.sink.rows import ValueChecks
from rtm_lakebase.sink.settings import SinkSettings
from rtm_lakebase.sink.statements import (
    FOLDS_UNICODE_QUERY,
    ColumnInfo,
    TableNotFound,
    copy_statement,
    fetch_columns,
    insert_ignore_statement,
    pg_name,
    primary_key_columns,
    table_identifier,
    upsert_statement,
)

log = logging.getLogger("rtm_lakebase.sink.writer")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


class PostgresTarget:
    def __init__(self, connection: ConnectionSettings, settings: SinkSettings, metrics: SinkMetrics):
        self.connection, self.settings, self.metrics = connection, settings, metrics
        self.identifier = table_identifier(settings.table, settings.schema)
        self.description = self.identifier.as_string(None)
        self.conn: psycopg.Connection | None = None
        self.table_columns: dict[str, ColumnInfo] = {}
        self.key_columns: tuple[str, ...] = tuple(pg_name(k) for k in settings.key_columns)
        self.version_column = pg_name(settings.version_column) if settings.version_column else None
        self.columns: tuple[str, ...] = ()
        self._convert: list[Callable[[Any], Any] | None] = []
        self._transformer: Transformer | None = None
        self._statement: Any = None
        self._checks: ValueChecks | None = None
        self._diagnosis: FlushDiagnosis | None = None
        self._key_idx: tuple[int, ...] = ()
        self._fold_unicode = True
        self._abandoned = threading.Event()  # set by abandon(): stop retrying, stop sleeping
        self._in_statement = False

    # -- open / close -------------------------------------------------------------
    def open(self) -> None:
        """Connect (with retries) and read the table's columns and key."""
        try:
            self._retrying(self._describe, "open")
        except BaseException:
            self.close()
            raise

    def close(self, keep: bool = False) -> None:
        """Close the connection, or with ``keep`` hand it to this process's pool for the next task."""
        conn, self.conn = self.conn, None
        max_age = self.settings.connection_max_age_s
        if conn is not None and max_age > 0:
            if keep:
                POOL.give_back(self.connection, conn, max_age)
            else:
                POOL.discard(conn)
        elif conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection must not hide the real error
                log.debug("ignoring an error while closing the connection", exc_info=True)

    def abandon(self) -> None:
        """The task failed: stop the flush in flight now (from another thread).

        A backoff sleep ends at once, no retry or row search starts, and a statement
        running on the server is cancelled; the flush then raises :class:`FlushAbandoned`.
        """
        self._abandoned.set()
        conn = self.conn
        if conn is not None and self._in_statement and not conn.closed:
            try:
                conn.cancel_safe(timeout=5)
            except Exception:  # the connection is discarded anyway; the flush stops at its next step
                log.debug("could not cancel the statement in flight", exc_info=True)

    def _stop_if_abandoned(self, what: str) -> None:
        if self._abandoned.is_set():
            raise FlushAbandoned(f"{what} on {self.description} abandoned: the task failed")

    def _connect(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            max_age = self.settings.connection_max_age_s
            self.conn = (POOL.connect(self.connection, max_age) if max_age > 0
                         else connect(self.connection, autocommit=True))
        return self.conn

    def _describe(self, conn: psycopg.Connection) -> None:
        s = self.settings
        try:
            self.table_columns = fetch_columns(conn, s.table, s.schema)
        except TableNotFound as exc:
            raise SinkError(str(exc)) from None
        if s.mode != "append" and not self.key_columns:
            self.key_columns = tuple(primary_key_columns(conn, s.table, s.schema))
            if not self.key_columns:
                raise SinkError(f"table {self.description} has no primary key: set key_columns "
                                f"(mode={s.mode!r} needs a unique key for ON CONFLICT)")
        unknown = [k for k in self.key_columns if k not in self.table_columns]
        if unknown:
            raise SinkError(f"key column(s) {unknown} not in table {self.description}")
        if self.version_column and self.version_column not in self.table_columns:
            raise SinkError(f"version_column {self.version_column!r} not in table {self.description}")
        if any(self.table_columns[k].base_type == "citext" for k in self.key_columns):
            # citext folds case as lower() does under the database's collation: ASCII only under "C"
            self._fold_unicode = bool(conn.execute(FOLDS_UNICODE_QUERY).fetchone()[0])

    # -- the statement, once the columns are known ------------------------------------
    def prepare(self, columns: tuple[str, ...]) -> None:
        """Check the written columns against the table and build the statement for them.

        Names longer than 63 bytes are cut as Postgres cuts them, so they reach
        the column a plain ``INSERT`` with the same name reaches.
        """
        s, table, version = self.settings, self.table_columns, self.version_column
        resolved = tuple(pg_name(c) for c in columns)
        if len(set(resolved)) != len(resolved):
            same = sorted({c for c, r in zip(columns, resolved, strict=True) if resolved.count(r) > 1})
            raise SinkError(f"columns {same} are one column in Postgres, which cuts names to 63 bytes")
        columns = resolved
        unknown = [c for c in columns if c not in table]
        if unknown:
            raise SinkError(f"column(s) {unknown} not in table {self.description}; table columns: {list(table)}")
        fixed = [f"{c} ({table[c].not_writable})" for c in columns if table[c].not_writable]
        if fixed:
            raise SinkError(f"column(s) {fixed} of {self.description} cannot be written (a plain INSERT refuses "
                            "them too): leave them out of the rows; Postgres fills them")
        if s.mode != "append":
            missing = [k for k in self.key_columns if k not in columns]
            if missing:
                raise SinkError(f"key column(s) {missing} are not among the written columns {list(columns)}")
        if version and version not in columns:
            raise SinkError(f"version_column {version!r} is not among the written columns {list(columns)}")
        if s.mode == "upsert":
            statement = upsert_statement(self.identifier, columns, self.key_columns, table,
                                         version, s.skip_unchanged)
        elif s.mode == "insert_ignore":
            statement = insert_ignore_statement(self.identifier, columns, self.key_columns, table)
        else:
            statement = copy_statement(self.identifier, columns)
        # Rendered once: the same bytes every flush let psycopg prepare the statement.
        self._statement = statement.as_bytes(self.conn) if self.conn is not None else statement
        self.columns = columns
        self._key_idx = tuple(columns.index(k) for k in self.key_columns) if s.mode != "append" else ()
        ordered = set(self._key_idx) | ({columns.index(version)} if version else set())
        self._checks = ValueChecks(columns, [table[c].base_type for c in columns], ordered)
        self._convert = [self._converter(table[c]) for c in columns]
        self._diagnosis = FlushDiagnosis(self.identifier, self.description, columns, table, self.key_of,
                                         self._write_rows, self.redact, self.transport)

    def _converter(self, info: ColumnInfo) -> Callable[[Any], Any] | None:
        """How a value travels, when not as it is: arrays as their text form, local times as instants."""
        if info.is_array and self.settings.mode != "append":  # COPY writes lists itself
            return self._array_text
        if info.base_type == "timestamp with time zone":
            # Spark hands a TimestampType value to Python as the worker's local wall-clock time
            # (naive); read it in that zone, so the instant does not depend on the server's TimeZone.
            return lambda v: v.astimezone() if type(v) is dt.datetime and v.tzinfo is None else v
        return None

    def _array_text(self, value: Any) -> Any:
        """A list as Postgres array text (``{1,2}``), by psycopg's own text dumper."""
        if value is None:
            return None
        if self._transformer is None:
            self._transformer = Transformer(self.conn)
        return bytes(self._transformer.get_dumper(value, PyFormat.TEXT).dump(value)).decode("utf-8")

    def key_forms(self) -> dict[str, Callable[[Any], Any]]:
        """Per key column, the form in which Postgres compares its keys, where Python's differs.

        ``char(n)`` ignores trailing spaces and ``citext`` case, so ``'abc'`` and
        ``'abc  '`` are one key: the buffer keeps one row for them (the last, or the
        first in insert_ignore mode), as writing them one after the other would. Case
        folds as the database's ``lower()`` does (ASCII only under the "C" collation).
        """
        forms: dict[str, Callable[[Any], Any]] = {}
        for k in self.key_columns:
            base = self.table_columns[k].base_type
            if base == "character":
                forms[k] = lambda v: v.rstrip(" ") if type(v) is str else v
            elif base == "citext" and self._fold_unicode:
                forms[k] = lambda v: v.lower() if type(v) is str else v
            elif base == "citext":  # "C" collation: only A-Z fold, so 'É' and 'é' stay two keys
                forms[k] = lambda v: v.translate(_ASCII_LOWER) if type(v) is str else v
        return forms

    def transport(self, column: str, value: Any) -> Any:
        """``value`` of ``column`` as one-column ``unnest`` carries it (for the diagnosis, in every mode)."""
        if column in self.table_columns and self.table_columns[column].is_array:
            return self._array_text(value)
        convert = self._convert[self.columns.index(column)] if column in self.columns else None
        return convert(value) if convert is not None else value

    def _converted(self, arrays: list) -> list:
        if not any(self._convert):
            return arrays
        return [col if conv is None else [conv(v) for v in col]
                for col, conv in zip(arrays, self._convert, strict=True)]

    def key_of(self, values: tuple) -> dict[str, Any] | None:
        return {k: values[i] for k, i in zip(self.key_columns, self._key_idx, strict=True)} if self._key_idx else None

    # -- one flush ------------------------------------------------------------------------
    def write(self, batch: list[tuple], by_timer: bool) -> None:
        """Write one batch or raise BadRowError / SinkError / SinkConnectionError; nothing half-written."""
        started = time.perf_counter()
        if self.settings.mode == "append":  # COPY sends rows; columns are only looked at
            arrays = list(zip(*batch, strict=True))
        else:  # one array parameter per column
            arrays = [list(column) for column in zip(*batch, strict=True)]
        problem = self._checks.first_problem(arrays)
        if problem is not None:
            row, column, reason = problem
            raise self._diagnosis.bad_value(batch[row], self.columns[column], reason)
        if self.settings.mode == "append":
            arrays = None if not any(self._convert) else arrays
        written = self._retrying(lambda conn: self._write_rows(conn, batch, arrays), "flush", batch)
        skipped = len(batch) - written if self.settings.mode != "append" else 0
        self.metrics.record_flush((time.perf_counter() - started) * 1000, written, skipped,
                                  stale=self.version_column is not None, by_timer=by_timer)

    def _write_rows(self, conn: psycopg.Connection, batch: list[tuple], arrays: list | None = None) -> int:
        if arrays is None and any(self._convert):
            arrays = [list(column) for column in zip(*batch, strict=True)]
        if arrays is not None:
            arrays = self._converted(arrays)
        if self.settings.mode == "append":
            rows = batch if arrays is None else zip(*arrays, strict=True)
            with conn.cursor() as cur, cur.copy(self._statement) as copy:
                for values in rows:
                    copy.write_row(values)
            return len(batch)
        if arrays is None:
            arrays = [list(column) for column in zip(*batch, strict=True)]
        return max(conn.execute(self._statement, arrays).rowcount, 0)

    def _retrying(self, action: Callable[[psycopg.Connection], Any], what: str,
                  batch: list[tuple] | None = None) -> Any:
        """Run ``action(connection)``; retry what retrying can change, explain the rest."""
        s, attempt, started = self.settings, 0, time.monotonic()
        while True:
            self._stop_if_abandoned(what)
            connecting = True
            began = time.monotonic()
            try:
                conn = self._connect()
                connecting = False
                self._in_statement = True
                try:
                    return action(conn)
                finally:
                    self._in_statement = False
            except (SinkError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # classified below
                self._stop_if_abandoned(what)  # a cancelled statement is not a statement timeout
                if connecting and not isinstance(exc, psycopg.Error):
                    raise  # settings that cannot work, a token source that failed: their own clear error
                kind = classify(exc, connecting=connecting)
                sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
                if kind in (Failure.CONNECTION, Failure.CONFLICT) and attempt < s.max_retries:
                    attempt += 1
                    delay = backoff_seconds(attempt, s.backoff_initial_ms, s.backoff_max_ms)
                    log.warning("postgres sink %s: %s (attempt %d of %d), retrying in %.2f s: %s", what,
                                kind.value, attempt, s.max_retries, delay, self.redact(exc))
                    if kind is Failure.CONNECTION:
                        self.close()
                        self.metrics.retries += 1
                        if what != "open":
                            self.metrics.reconnects += 1
                    else:
                        self.metrics.conflict_retries += 1
                    self._abandoned.wait(delay)  # ends at once when the task fails meanwhile
                    continue
                if kind is Failure.CONNECTION:
                    self.close()
                    raise SinkConnectionError(
                        f"{what} failed after {attempt + 1} attempts in {time.monotonic() - started:.1f} s "
                        f"({self.connection.describe()}): {self.redact(exc)}", sqlstate) from None
                if connecting:  # wrong password, unknown database...: retrying cannot help
                    self.close()
                    raise SinkConnectionError(f"cannot connect to Postgres ({self.connection.describe()}): "
                                              f"{self.redact(exc)}", sqlstate) from None
                if kind is Failure.CONFLICT:
                    raise SinkError(f"flush to {self.description} still hit a {kind.value} after {attempt + 1} "
                                    f"attempts: {self.redact(exc)}", sqlstate) from None
                if batch is not None and kind in (Failure.ROW, Failure.TIMEOUT):
                    budget = time.monotonic() - began if kind is Failure.TIMEOUT else None
                    raise self._diagnosis.explain(self.conn, batch, exc, budget) from None
                raise SinkError(f"{what} on {self.description} failed (not retried): {self.redact(exc)}",
                                sqlstate) from None

    def redact(self, exc: object) -> str:
        secret = getattr(self.connection, "password", None)
        return redact(exc, secret)


def backoff_seconds(attempt: int, initial_ms: int, max_ms: int) -> float:
    """Exponential backoff with 'equal jitter': half fixed, half random, capped."""
    cap = min(max_ms, initial_ms * 2 ** (attempt - 1)) / 1000
    return cap / 2 + random.uniform(0, cap / 2)
