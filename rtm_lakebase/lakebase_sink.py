"""Production foreach writer for Lakebase/Postgres: idempotent batched upserts, dwell-time flushes, retries.

``PostgresForeachWriter`` is a duck-typed PySpark ``foreach`` writer
(``open``/``process``/``close``) for real-time mode and micro-batch queries:

- one connection per task, opened in ``open()`` (never in ``__init__``), with
  bounded jittered retries for transient failures and an immediate, clear
  error for wrong credentials; ``open()`` raises instead of returning False;
- modes ``"upsert"`` (``INSERT … ON CONFLICT DO UPDATE`` from unnest arrays,
  skipping no-op updates, optional version guard), ``"insert_ignore"``
  (``ON CONFLICT DO NOTHING``) and ``"append"`` (``COPY``);
- rows are buffered, deduplicated by key, and written as one statement (one
  transaction) when ``max_batch_rows`` keys are buffered or when the oldest
  buffered row has waited ``max_dwell_ms``. One flusher thread per writer does
  all writing, in order, so the tail is written even when no new row arrives
  (under real-time mode ``close()`` only comes at the end of a long batch). An
  error in that thread is raised by the next ``process()`` or by ``close()``;
- a bad row fails the flush with :class:`BadRowError` naming its key and
  column; nothing of that flush is written;
- the password never shows in ``repr``, logs or error messages.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Mapping, Sequence

import psycopg
from psycopg import sql

from rtm_lakebase.pg_connection import (ConnectionSettings, as_connection_settings, connect,
                                    is_permanent_connect_error, redact)
from rtm_lakebase.pg_statements import (ColumnInfo, TableNotFound, copy_statement, fetch_columns,
                                    insert_ignore_statement, primary_key_columns, table_identifier,
                                    upsert_statement)
from rtm_lakebase.sink_metrics import SinkMetrics

log = logging.getLogger(__name__)

MODES = ("upsert", "insert_ignore", "append")


class SinkError(RuntimeError):
    """The sink could not write; the message says why (secrets redacted)."""


class SinkConnectionError(SinkError):
    """Could not connect, or the connection kept failing past the retry budget."""


class BadRowError(SinkError):
    """A row was rejected; ``key`` and ``column`` name it. Nothing of its flush was written."""

    def __init__(self, message: str, key: Mapping[str, Any] | None = None,
                 column: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.key = dict(key) if key is not None else None
        self.column = column
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (BadRowError, (str(self), self.key, self.column, self.sqlstate))


# --8<-- [start:sink_settings]
@dataclass(frozen=True)
class SinkSettings:
    """What to write and how. Every knob of the writer lives here."""

    table: str                              # one identifier; a dot is part of the name
    schema: str | None = None               # None: the connection's current schema
    mode: str = "upsert"                    # "upsert" | "insert_ignore" | "append"
    key_columns: tuple[str, ...] = ()       # () → the table's primary key
    columns: tuple[str, ...] | None = None  # None → the row's fields
    version_column: str | None = None       # upsert: only a strictly newer version replaces a row
    skip_unchanged: bool = True             # upsert without version: skip identical updates
    max_batch_rows: int = 1000              # flush when this many distinct keys are buffered
    max_dwell_ms: int = 100                 # ... or when the oldest buffered row is this old
    max_retries: int = 6                    # transient failures (connect or flush) before giving up
    backoff_initial_ms: int = 250           # first retry delay; doubles, with jitter
    backoff_max_ms: int = 5000              # cap of one retry delay
# --8<-- [end:sink_settings]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not self.table:
            raise ValueError("table must not be empty")
        object.__setattr__(self, "key_columns", tuple(self.key_columns))
        if self.columns is not None:
            object.__setattr__(self, "columns", tuple(self.columns))
        if self.version_column and self.mode != "upsert":
            raise ValueError("version_column only applies to mode='upsert'")
        if self.max_batch_rows < 1:
            raise ValueError("max_batch_rows must be at least 1")
        if self.max_dwell_ms < 0:
            raise ValueError("max_dwell_ms must not be negative (0 disables time-based flushes)")
        if self.max_retries < 0 or self.backoff_initial_ms < 0 or self.backoff_max_ms < 0:
            raise ValueError("retry settings must not be negative")


def _backoff_seconds(attempt: int, settings: SinkSettings) -> float:
    """Exponential backoff with 'equal jitter': half fixed, half random, capped."""
    cap = min(settings.backoff_max_ms, settings.backoff_initial_ms * 2 ** (attempt - 1)) / 1000
    return cap / 2 + random.uniform(0, cap / 2)


def _is_transient(exc: BaseException) -> bool:
    """Lost connections, server restarts, serialization failures: worth a reconnect and retry."""
    if isinstance(exc, (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)):
        return True
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return not is_permanent_connect_error(exc)
    return False


def _is_row_error(exc: BaseException) -> bool:
    """Errors caused by the data of some row (bad value, constraint), not by the setup."""
    if isinstance(exc, (psycopg.DataError, psycopg.IntegrityError,
                        psycopg.errors.CardinalityViolation)):
        return True
    # psycopg cannot adapt a Python value: client side, no SQLSTATE.
    return isinstance(exc, psycopg.ProgrammingError) and getattr(exc, "sqlstate", None) is None


class PostgresForeachWriter:
    """A picklable ``foreach`` writer; see the module docstring.

    ``connection``: :class:`ConnectionSettings` or a DSN string. ``settings``:
    a :class:`SinkSettings`, or pass its fields as keyword arguments.
    """

    def __init__(self, connection: ConnectionSettings | str, settings: SinkSettings | None = None,
                 **options: Any):
        if settings is not None and options:
            raise TypeError("pass either settings= or keyword options, not both")
        self.connection = as_connection_settings(connection)
        self.settings = settings if settings is not None else SinkSettings(**options)
        self._reset_runtime()

    # -- pickling: only the configuration travels to executors --------------
    def __getstate__(self) -> dict[str, Any]:
        return {"connection": self.connection, "settings": self.settings}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.connection = state["connection"]
        self.settings = state["settings"]
        self._reset_runtime()

    def __repr__(self) -> str:
        return f"PostgresForeachWriter(connection={self.connection!r}, settings={self.settings!r})"

    __str__ = __repr__

    def _reset_runtime(self) -> None:
        self._lock = threading.Lock()  # guards the buffer, the queue and the metrics
        self._cond = threading.Condition(self._lock)
        self._conn: psycopg.Connection | None = None  # used by the flusher thread only, after open()
        self._flusher: threading.Thread | None = None
        self._sealed: deque[tuple[list[tuple], bool]] = deque()  # batches waiting or being written
        self._closing = False
        self._error: BaseException | None = None
        self._buffer: dict[tuple, tuple] | list[tuple] = [] if self.settings.mode == "append" else {}
        self._oldest: float | None = None
        self._table_columns: dict[str, ColumnInfo] | None = None
        self._key_columns: tuple[str, ...] = self.settings.key_columns
        self._columns: tuple[str, ...] | None = None
        self._statement: sql.Composed | bytes | None = None
        self._to_values = None  # row → tuple in column order, set on the first row
        self._key_of = None  # values → key (a scalar for one key column, else a tuple)
        self._key_idx: tuple[int, ...] = ()
        self._composite_key = False
        self._max_rows = self.settings.max_batch_rows
        self._version_idx: int | None = None
        self.partition_id: int | None = None
        self.epoch_id: int | None = None
        self.metrics = SinkMetrics()

    # -- the foreach contract ---------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Connect (with retries), read the table's column types, start the flusher thread.

        Raises on failure: returning False would make Spark drop this
        partition's rows without an error.
        """
        if self._conn is not None:
            self._close_connection()
        self._reset_runtime()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._with_retries(self._connect_and_describe, "open")
        self._flusher = threading.Thread(target=self._flusher_loop, daemon=True,
                                         name=f"pg-sink-flusher-p{partition_id}")
        self._flusher.start()
        return True

    def process(self, row: Any) -> None:
        """Buffer one row (deduplicated by key); flush when ``max_batch_rows`` keys are buffered."""
        with self._lock:
            if self._error is not None:
                raise self._error
            to_values = self._to_values or self._prepare_layout(row)
            try:
                values = to_values(row)
            except (KeyError, IndexError, TypeError) as exc:
                raise BadRowError(f"row does not have the sink's columns {list(self._columns or ())}: "
                                  f"{type(exc).__name__}: {exc}") from None
            self.metrics.rows_received += 1
            buffer = self._buffer
            key_of = self._key_of
            if key_of is None:  # append
                buffer.append(values)
            else:
                key = key_of(values)
                if key is None or (self._composite_key and None in key):
                    raise self._null_key(values)
                previous = buffer.setdefault(key, values)
                if previous is not values:
                    self.metrics.rows_deduplicated += 1
                    if self._keeps_new(previous, values):
                        buffer[key] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
                self._cond.notify_all()
            if len(buffer) >= self._max_rows:
                self._seal(by_timer=False)
                # Back-pressure: at most one batch waits while another is being written.
                while len(self._sealed) > 1 and self._error is None:
                    self._cond.wait()
                if self._error is not None:
                    raise self._error

    def _null_key(self, values: tuple) -> BadRowError:
        key = {k: values[i] for k, i in zip(self._key_columns, self._key_idx)}
        return BadRowError(
            f"row rejected: key column(s) {self._key_desc()} are null (row {self._row_desc(values)}); "
            "nothing of this batch was written",
            key=key, column=next(k for k, v in key.items() if v is None))

    def close(self, error: BaseException | None) -> None:
        """On success write what is left and wait for it; on error discard what is not yet written."""
        pending = None
        try:
            with self._cond:
                if error is None and self._error is None and self._buffer:
                    self._seal(by_timer=False)
                if error is not None:
                    while len(self._sealed) > 1:  # keep only the batch being written, if any
                        self._sealed.pop()
                    self._buffer.clear()
                self._closing = True
                self._cond.notify_all()
            flusher, self._flusher = self._flusher, None
            if flusher is not None and flusher is not threading.current_thread():
                flusher.join()
            if error is None:
                pending = self._error
        finally:
            with self._lock:
                self._buffer.clear()
                self._sealed.clear()
                self._oldest = None
            self._close_connection()
            log.info("postgres sink closed (partition=%s epoch=%s error=%s): %s", self.partition_id,
                     self.epoch_id, type(error).__name__ if error else None, self.metrics.snapshot())
        if pending is not None:
            raise pending

    # -- buffering ----------------------------------------------------------
    def _keeps_new(self, previous: tuple, new: tuple) -> bool:
        if self.settings.mode == "insert_ignore":
            return False  # the first row for a key wins, as ON CONFLICT DO NOTHING does
        if self._version_idx is None:
            return True  # last row wins
        # Same rule as the statement's guard: only a strictly newer version replaces a row,
        # so with equal versions the first row wins whether the tie is in one flush or across two.
        old_v, new_v = previous[self._version_idx], new[self._version_idx]
        if new_v is None:
            return False
        return old_v is None or new_v > old_v

    def _prepare_layout(self, row: Any):
        """On the first row: pick the columns, check them against the table, build the statement."""
        fields = getattr(row, "__fields__", None)
        if fields is None and isinstance(row, Mapping):
            fields = list(row.keys())
        columns = self.settings.columns or (tuple(fields) if fields is not None else None)
        if columns is None:
            raise SinkError("rows are plain sequences: set columns=(…) in the sink settings")
        self._set_columns(tuple(columns))
        if isinstance(row, Mapping):
            picks: tuple = tuple(columns)
        elif fields is not None:
            missing = [c for c in columns if c not in fields]
            if missing:
                raise SinkError(f"the rows have no field(s) {missing}; row fields: {list(fields)}")
            picks = tuple(list(fields).index(c) for c in columns)
        else:
            if len(row) != len(columns):
                raise SinkError(f"row has {len(row)} values but columns has {len(columns)}")
            picks = tuple(range(len(columns)))
        if not isinstance(row, Mapping) and picks == tuple(range(len(row))):
            to_values = tuple  # a Spark Row is a tuple already in column order
        elif len(picks) == 1:
            to_values = lambda r, _p=picks[0]: (r[_p],)  # noqa: E731
        else:
            to_values = itemgetter(*picks)
        self._to_values = to_values
        return to_values

    def _set_columns(self, columns: tuple[str, ...]) -> None:
        table_columns = self._table_columns or {}
        unknown = [c for c in columns if c not in table_columns]
        if unknown:
            raise SinkError(f"column(s) {unknown} not in table {self._table_desc()}; "
                            f"table columns: {list(table_columns)}")
        mode = self.settings.mode
        if mode != "append":
            missing_keys = [k for k in self._key_columns if k not in columns]
            if missing_keys:
                raise SinkError(f"key column(s) {missing_keys} are not among the written columns {list(columns)}")
            arrays = [c for c in columns if table_columns[c].is_array]
            if arrays:
                raise SinkError(f"column(s) {arrays} are arrays, which unnest cannot carry; "
                                "use mode='append' or serialise them (e.g. to jsonb)")
        version = self.settings.version_column
        if version and version not in columns:
            raise SinkError(f"version_column {version!r} is not among the written columns {list(columns)}")
        self._columns = columns
        self._key_idx = tuple(columns.index(k) for k in self._key_columns) if mode != "append" else ()
        self._key_of = itemgetter(*self._key_idx) if self._key_idx else None
        self._composite_key = len(self._key_idx) > 1
        self._version_idx = columns.index(version) if version else None
        target = table_identifier(self.settings.table, self.settings.schema)
        if mode == "upsert":
            self._statement = upsert_statement(target, columns, self._key_columns, table_columns,
                                               version, self.settings.skip_unchanged)
        elif mode == "insert_ignore":
            self._statement = insert_ignore_statement(target, columns, self._key_columns, table_columns)
        else:
            self._statement = copy_statement(target, columns)
        if self._conn is not None:  # render once; the same bytes every flush let psycopg prepare it
            self._statement = self._statement.as_bytes(self._conn)

    # -- connection ---------------------------------------------------------
    def _connect_and_describe(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.connection, autocommit=True)
        if self._table_columns is None:
            s = self.settings
            try:
                self._table_columns = fetch_columns(self._conn, s.table, s.schema)
            except TableNotFound as exc:
                raise SinkError(str(exc)) from None
            if s.mode != "append" and not self._key_columns:
                self._key_columns = tuple(primary_key_columns(self._conn, s.table, s.schema))
                if not self._key_columns:
                    raise SinkError(f"table {self._table_desc()} has no primary key: set key_columns "
                                    f"(mode={s.mode!r} needs a unique key for ON CONFLICT)")
            unknown = [k for k in self._key_columns if k not in self._table_columns]
            if unknown:
                raise SinkError(f"key column(s) {unknown} not in table {self._table_desc()}")

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection must not hide the real error
                log.debug("ignoring an error while closing the connection", exc_info=True)

    def _with_retries(self, action, what: str):
        """Run ``action``; on a transient error drop the connection, back off and try again."""
        attempt = 0
        started = time.monotonic()
        while True:
            try:
                return action()
            except psycopg.Error as exc:
                if not _is_transient(exc):
                    if isinstance(exc, psycopg.OperationalError):  # e.g. wrong password
                        raise SinkConnectionError(
                            f"cannot connect to Postgres ({self.connection.describe()}): "
                            f"{self._redact(exc)}") from None
                    raise
                attempt += 1
                self._close_connection()
                if attempt > self.settings.max_retries:
                    raise SinkConnectionError(
                        f"{what} failed after {attempt} attempts in {time.monotonic() - started:.1f} s "
                        f"({self.connection.describe()}): {self._redact(exc)}") from None
                self.metrics.retries += 1
                delay = _backoff_seconds(attempt, self.settings)
                log.warning("postgres sink %s: transient error (attempt %d of %d), retrying in %.2f s: %s",
                            what, attempt, self.settings.max_retries, delay, self._redact(exc))
                time.sleep(delay)
                if what != "open":
                    self.metrics.reconnects += 1

    # -- flushing -----------------------------------------------------------
    def _seal(self, by_timer: bool) -> None:
        """Move the buffer to the flusher's queue (caller holds the lock)."""
        buffer = self._buffer
        batch = list(buffer) if isinstance(buffer, list) else list(buffer.values())
        buffer.clear()
        self._oldest = None
        if batch:
            self._sealed.append((batch, by_timer))
            self._cond.notify_all()

    def _flusher_loop(self) -> None:
        """The one thread that writes: queued batches in order, and the buffer once it is too old.

        Errors are kept in ``self._error`` and raised by the next ``process()``
        or by ``close()``; after an error nothing more is written.
        """
        dwell = self.settings.max_dwell_ms / 1000
        with self._cond:
            while self._error is None:
                if not self._sealed:
                    if self._buffer and dwell and time.monotonic() >= self._oldest + dwell:
                        self._seal(by_timer=True)
                        continue
                    if self._closing:
                        return
                    timeout = None
                    if self._buffer and dwell:
                        timeout = self._oldest + dwell - time.monotonic()
                    self._cond.wait(timeout)
                    continue
                batch, by_timer = self._sealed[0]
                self._cond.release()
                try:
                    started = time.perf_counter()
                    written, error = self._flush_batch(batch), None
                except BaseException as exc:  # noqa: BLE001 - handed to process()/close()
                    error = exc
                finally:
                    self._cond.acquire()
                if self._sealed and self._sealed[0][0] is batch:
                    self._sealed.popleft()
                if error is not None:
                    self._error = error
                    log.error("postgres sink: flush failed; raised by the next process() or close(): %s",
                              self._redact(error))
                else:
                    skipped = len(batch) - written if self.settings.mode != "append" else 0
                    self.metrics.record_flush((time.perf_counter() - started) * 1000, written, skipped,
                                              stale=self._version_idx is not None, by_timer=by_timer)
                self._cond.notify_all()

    def _flush_batch(self, batch: list[tuple]) -> int:
        """Write one batch (retrying transient failures); raise BadRowError/SinkError otherwise."""
        try:
            return self._with_retries(lambda: self._write(batch), "flush")
        except psycopg.Error as exc:
            if _is_row_error(exc):
                raise self._diagnose(batch, exc) from exc
            raise SinkError(f"flush to {self._table_desc()} failed: {self._redact(exc)}") from None

    def _write(self, batch: list[tuple]) -> int:
        """One statement (or one COPY) in autocommit: its own transaction, no BEGIN/COMMIT round trips."""
        if self._conn is None or self._conn.closed:
            self._connect_and_describe()
        return self._write_rows(self._conn, batch)

    def _write_rows(self, conn: psycopg.Connection, batch: list[tuple]) -> int:
        if self.settings.mode == "append":
            with conn.cursor() as cur:
                with cur.copy(self._statement) as copy:
                    for values in batch:
                        copy.write_row(values)
            return len(batch)
        arrays = [list(column) for column in zip(*batch)]
        cur = conn.execute(self._statement, arrays)
        return max(cur.rowcount, 0)

    # -- diagnostics ----------------------------------------------------------
    def _redact(self, exc: object) -> str:
        secret = None
        try:
            secret = self.connection.password
        except AttributeError:
            pass
        return redact(exc, secret)

    def _table_desc(self) -> str:
        return table_identifier(self.settings.table, self.settings.schema).as_string(None)

    def _key_desc(self) -> str:
        return "(" + ", ".join(self._key_columns) + ")"

    def _row_key(self, values: tuple) -> dict[str, Any]:
        if self._key_idx:
            return {k: values[i] for k, i in zip(self._key_columns, self._key_idx)}
        return {"row": self._row_desc(values)}

    def _row_desc(self, values: tuple) -> str:
        text = repr(dict(zip(self._columns or (), values)))
        return text if len(text) <= 300 else text[:297] + "..."

    def _diagnose(self, batch: list[tuple], exc: psycopg.Error) -> BadRowError:
        """Find the first row (and column) that the flush failed on; write nothing."""
        columns = self._columns or ()
        # 1. Python values of mixed types in one column cannot form one array.
        for ci, name in enumerate(columns):
            first_type = None
            for values in batch:
                value = values[ci]
                if value is None:
                    continue
                if first_type is None:
                    first_type = type(value)
                elif type(value) is not first_type:
                    return self._bad_row(values, name, exc, f"{type(value).__name__} value {value!r} "
                                         f"where earlier rows have {first_type.__name__}")
        # 2. Replay the batch row by row inside a transaction that is always rolled back.
        conn = self._conn
        try:
            with conn.transaction(force_rollback=True):
                for values in batch:
                    try:
                        with conn.transaction():
                            self._write_rows(conn, [values])
                    except psycopg.Error as row_exc:
                        if not _is_row_error(row_exc):
                            raise
                        column = row_exc.diag.column_name if hasattr(row_exc, "diag") else None
                        column = column or self._find_column(conn, values)
                        return self._bad_row(values, column, row_exc, None)
        except psycopg.Error as diag_exc:
            log.debug("diagnosis of a failed flush failed", exc_info=True)
            return BadRowError(f"flush to {self._table_desc()} failed: {self._redact(exc)} "
                               f"(diagnosis failed: {self._redact(diag_exc)}); nothing of this flush was written",
                               sqlstate=getattr(exc, "sqlstate", None))
        return BadRowError(
            f"flush to {self._table_desc()} failed but no single row fails alone (keys that are distinct "
            f"in Python but equal in Postgres?): {self._redact(exc)}; nothing of this flush was written",
            sqlstate=getattr(exc, "sqlstate", None))

    def _find_column(self, conn: psycopg.Connection, values: tuple) -> str | None:
        """Insert each value alone into a constraint-free copy of the table; the one that fails is it."""
        table_columns = self._table_columns or {}
        target = table_identifier(self.settings.table, self.settings.schema)
        probe = sql.Identifier("pg_temp", "sink_probe")
        with conn.transaction():
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(probe))
            conn.execute(sql.SQL("CREATE TEMP TABLE sink_probe AS SELECT * FROM {} WITH NO DATA").format(target))
            for name, value in zip(self._columns or (), values):
                if value is None:
                    continue
                statement = sql.SQL("INSERT INTO {} ({}) SELECT * FROM unnest({}::{}[])").format(
                    probe, sql.Identifier(name), sql.Placeholder(), sql.SQL(table_columns[name].base_type))
                try:
                    with conn.transaction():
                        conn.execute(statement, [[value]])
                except psycopg.Error as exc:
                    if _is_row_error(exc):
                        return name
                    raise
        return None

    def _bad_row(self, values: tuple, column: str | None, exc: BaseException, detail: str | None) -> BadRowError:
        key = self._row_key(values)
        key_text = ", ".join(f"{k}={v!r}" for k, v in key.items())
        col_type = ""
        if column and self._table_columns and column in self._table_columns:
            col_type = f" ({self._table_columns[column].full_type})"
        reason = detail or self._redact(exc).splitlines()[0]
        sqlstate = getattr(exc, "sqlstate", None)
        return BadRowError(
            f"row with key {key_text} rejected at column {column or '?'}{col_type}: {reason}"
            f"{f' [SQLSTATE {sqlstate}]' if sqlstate else ''}; nothing of this flush was written "
            f"to {self._table_desc()}",
            key=key, column=column, sqlstate=sqlstate)


def writer_for(dsn: str, table: str, **options: Any) -> PostgresForeachWriter:
    """Shorthand: ``writer_for(dsn, "events", key_columns=("id",), version_column="version")``."""
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


# --8<-- [start:start_query]
def start_upsert_query(events, dsn: str, table: str, checkpoint: str, real_time: bool = True):
    """Stream ``events`` into ``table`` with the idempotent upsert writer."""
    writer = PostgresForeachWriter(
        dsn,  # or ConnectionSettings(host=..., password=Secret(...)) / password_provider=...
        SinkSettings(table=table, key_columns=("id",), version_column="version",
                     max_batch_rows=1000, max_dwell_ms=100),
    )
    stream = (events.writeStream.foreach(writer)
              .outputMode("update")
              .option("checkpointLocation", checkpoint))
    if real_time:
        stream = stream.trigger(realTime="5 seconds")
    else:
        stream = stream.trigger(processingTime="0 seconds")
    return stream.start()
# --8<-- [end:start_query]


__all__ = ["BadRowError", "ConnectionSettings", "PostgresForeachWriter", "SinkConnectionError",
           "SinkError", "SinkSettings", "start_upsert_query", "writer_for"]
