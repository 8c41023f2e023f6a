"""Foreach writer for ``readings`` that names the row that broke it.

    from solution import ReadingsWriter
    query = (readings.writeStream
             .foreach(ReadingsWriter(dsn, "readings"))
             .outputMode("update")                  # real-time mode accepts update only
             .option("checkpointLocation", ckpt)
             .trigger(realTime="5 minutes")         # checkpoint interval, not a latency
             .start())

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``; an update that
  changes nothing is skipped), so Spark's at-least-once replays are harmless.
* A bad row is never dropped, truncated or cleaned: the task fails with
  ``BadRowError`` whose message starts ``row with id=<the id> rejected at column
  <col>: <reason>`` (the full id, ``repr``-quoted, so NULs and control
  characters are visible; the exception also carries ``.key``/``.column``/
  ``.sqlstate``).
* Rows that arrived before the bad row are committed before the error is raised
  and stay; nothing after it in the same task is written (Spark replays them
  after the fix, the upsert makes that harmless).
* Checked before sending (Postgres cannot store or would change them):
  NUL bytes and lone surrogates in text, NaN in a float column
  (``score`` has ``CHECK (score <> 'NaN')``), a null key, a non-float score,
  missing/unknown fields.  Everything else is Postgres' call (``NOT NULL``
  on ``sensor``, the CHECK, an id too long for the primary-key index, ...):
  the failed flush is rolled back, re-run row by row in arrival order, the rows
  before the offending one are committed, and the offending one is named with
  Postgres' reason and SQLSTATE.  Connection losses and deadlocks are retried
  (bounded, jittered backoff), never turned into a dropped row.
* ``open()`` returns ``True`` or raises; never ``False`` (Spark would skip the
  partition's rows without a trace).
* Real-time mode calls ``open()``/``close()`` once per long batch, so rows are
  flushed from ``process()`` (every ``max_batch_rows`` rows) and by a timer
  thread (``max_dwell_ms``), not only in ``close()``.

When the query learns of the failure: with stock ``writeStream.foreach`` under
real-time mode, Spark reads the Python worker's error only when the long batch
ends (up to the trigger duration).  So the writer also logs the named row at
ERROR on the executor the moment it is found, and calls ``on_failure(message)``
(e.g. a pager/webhook) once; under micro-batch the query fails at once.

SQL is built with ``psycopg.sql`` identifiers and bound parameters only.
"""
from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from typing import Any, Callable, Optional

import psycopg
from psycopg import sql

log = logging.getLogger("readings_writer")

_MAX_ID_IN_MESSAGE = 1_000_000  # characters; beyond that: prefix + length (never silently cut)

_COLUMNS_QUERY = """
SELECT a.attname,
       format_type(COALESCE(NULLIF(bt.typbasetype, 0), a.atttypid), -1) AS cast_type,
       a.attnum = ANY (COALESCE(i.indkey::int2[], '{}')) AS is_key
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type bt ON bt.oid = a.atttypid
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE c.relname = %(table)s
  AND (%(schema)s::text IS NULL AND pg_table_is_visible(c.oid) OR n.nspname = %(schema)s)
  AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum
"""

# SQLSTATE classes/codes that mean "this data" (name the row) vs "try again".
_ROW_CLASSES = ("22", "23", "54")
_ROW_CODES = ("21000", "42804", "42846")
_RETRY_CODES = ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300")


class SinkError(RuntimeError):
    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate


class BadRowError(SinkError):
    """A row the table refuses.  ``key`` is ``{"id": <id>}``; ``column`` may be None."""

    def __init__(self, message: str, key: dict, column: str | None, sqlstate: str | None = None):
        super().__init__(message, sqlstate)
        self.key, self.column = key, column


def _describe(key: dict) -> str:
    parts = []
    for k, v in key.items():
        text = repr(v)
        if len(text) > _MAX_ID_IN_MESSAGE:
            text = f"{text[:1000]}... ({len(v)} characters in all)"
        elif isinstance(v, str) and len(v) > 200:
            text = f"{text} ({len(v)} characters)"
        parts.append(f"{k}={text}")
    return ", ".join(parts)


def _client_check(cast_type: str, value: Any) -> Optional[str]:
    """Why the value cannot be sent unchanged, or None."""
    if value is None:
        return None
    if cast_type.endswith("[]"):
        if not isinstance(value, (list, tuple)):
            return f"expected a list, got {type(value).__name__}"
        for v in value:
            reason = _client_check(cast_type[:-2], v)
            if reason:
                return "element: " + reason
        return None
    if cast_type in ("text", "character varying", "bpchar", "citext", "name"):
        if not isinstance(value, str):
            return f"expected str, got {type(value).__name__}"
    if isinstance(value, str):
        if "\x00" in value:
            return f"text contains a NUL byte at position {value.index(chr(0))} (Postgres text cannot hold it)"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"text is not valid Unicode ({exc.reason} at position {exc.start})"
    if cast_type in ("double precision", "real"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected float, got {type(value).__name__}"
        if isinstance(value, float) and math.isnan(value):
            return "NaN is not a reading (the column's CHECK refuses it)"
    if cast_type in ("bigint", "integer", "smallint"):
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected int, got {type(value).__name__}"
    return None


class ReadingsWriter:
    """PySpark ``foreach`` writer: upsert on ``id``, a bad row fails the task by name."""

    def __init__(self, dsn: str, table: str = "readings", *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 5, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, on_failure: Callable[[str], None] | None = None):
        if not dsn:
            raise ValueError("dsn is required")
        parts = table.split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
        self.dsn = dsn
        self.schema, self.table = (parts if len(parts) == 2 else (None, parts[0]))
        self.max_batch_rows, self.max_dwell_ms = int(max_batch_rows), int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        self.on_failure = on_failure  # must be picklable (a module-level function / partial)
        self._reset()

    _SETTINGS = ("dsn", "schema", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                 "backoff_initial_ms", "backoff_max_ms", "on_failure")

    def _reset(self) -> None:
        self._conn = None
        self._lock: threading.Lock | None = None
        self._buffer: dict = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop: threading.Event | None = None
        self._timer: threading.Thread | None = None
        self._cols: list[str] = []
        self._types: dict[str, str] = {}
        self._keys: tuple[str, ...] = ()
        self._statement = None
        self._opened = False
        self.rows_written = 0

    def __getstate__(self):
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __repr__(self):  # the DSN may hold a password
        return f"ReadingsWriter(table={self._name()!r})"

    def _name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    # -- foreach contract -------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called while already open")
        self._conn = self._connect_with_retries()
        try:
            self._load_table()
        except BaseException:
            self._conn.close()  # Spark calls no close() after a failed open()
            self._conn = None
            raise
        self._lock = threading.Lock()
        self._buffer, self._oldest, self._error = {}, None, None
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="readings-flush", daemon=True)
        self._timer.start()
        self._opened = True
        return True

    def process(self, row) -> None:
        if not self._opened:
            raise SinkError("process() called before open() or after close()")
        self._raise_stored()
        values, key = self._values(row)
        with self._lock:
            self._raise_stored()
            self._buffer.pop(key, None)       # last row for an id wins; order = arrival
            self._buffer[key] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_or_store()
                self._raise_stored()

    def close(self, error) -> None:
        if not self._opened:
            return
        self._opened = False
        self._stop.set()
        self._timer.join(timeout=60)
        try:
            if error is None:
                with self._lock:
                    if self._error is None and self._buffer:
                        self._flush_or_store()
                self._raise_stored()
            # with an error, unwritten rows are left for Spark's replay
        finally:
            try:
                self._conn.close()
            finally:
                self._conn = None

    # -- rows ---------------------------------------------------------------------------
    def _values(self, row) -> tuple[list, tuple]:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        key = {k: data.get(k) for k in self._keys}
        if not self._cols:
            unknown = [f for f in data if f not in self._types]
            if unknown:
                self._bad(key, unknown[0], f"field has no column in {self._name()}")
            self._cols = [c for c in self._types if c in data]
            missing_keys = [k for k in self._keys if k not in self._cols]
            if missing_keys:
                self._bad(key, missing_keys[0], "the row has no field for this key column")
            self._statement = self._build_statement()
        if set(data) != set(self._cols):
            extra = sorted(set(data) - set(self._cols))
            gone = sorted(set(self._cols) - set(data))
            self._bad(key, (extra or gone)[0], "row's fields differ from the first row's "
                      f"(extra {extra}, missing {gone})")
        for k in self._keys:
            if data[k] is None:
                self._bad(key, k, "null key")
        values = []
        for c in self._cols:
            v = data[c]
            reason = _client_check(self._types[c], v)
            if reason:
                self._bad(key, c, reason)
            values.append(bytes(v) if isinstance(v, bytearray) else v)
        return values, tuple(data[k] for k in self._keys)

    def _bad(self, key: dict, column: str | None, reason: str, sqlstate: str | None = None):
        """A bad row found in process(): commit the rows before it, then fail by name."""
        err = BadRowError(f"row with {_describe(key)} rejected{self._where(column)}: "
                          f"{reason}{f' [SQLSTATE {sqlstate}]' if sqlstate else ''}; "
                          f"rows before it were written to {self._name()}, this row and later ones were not",
                          key=key, column=column, sqlstate=sqlstate)
        if self._lock is not None:
            with self._lock:
                if self._error is None and self._buffer:
                    self._flush_or_store()  # rows that arrived before the bad one stay
                if self._error is not None:
                    raise self._error
        self._report(err)
        raise err

    def _where(self, column: str | None) -> str:
        if not column:
            return ""
        return f" at column {column} ({self._types.get(column, 'unknown type')})"

    # -- writing ------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _report(self, err: BaseException) -> None:
        log.error("readings sink stopped: %s", err)
        if self.on_failure is not None:
            try:
                self.on_failure(str(err))
            except Exception:  # an alert that fails must not hide the real error
                log.exception("on_failure raised")

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is None and self._buffer and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    self._flush_or_store()

    def _flush_or_store(self) -> None:
        """Flush under the lock; a failure is stored (and reported) for the next call."""
        try:
            self._flush()
        except BaseException as exc:
            self._error = exc
            self._report(exc)

    def _flush(self) -> None:
        keys = list(self._buffer)            # arrival order
        rows = [self._buffer[k] for k in keys]
        for attempt in range(self.max_retries + 1):
            try:
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                self.rows_written += len(rows)
                self._buffer.clear()
                self._oldest = None
                return
            except psycopg.Error as exc:
                self._rollback()
                kind = self._classify(exc)
                if kind == "row":
                    self._write_until_bad_row(rows)  # raises BadRowError naming the id
                    raise SinkError(f"flush to {self._name()} failed but no single row fails alone: "
                                    f"{_first_line(exc)}", exc.sqlstate) from None
                if kind == "retry" and attempt < self.max_retries:
                    log.warning("readings flush: retry %d after %s", attempt + 1, _first_line(exc))
                    self._sleep(attempt)
                    if self._conn.closed or self._conn.broken:
                        self._conn.close()
                        self._conn = self._connect_with_retries()
                    continue
                raise SinkError(f"flush to {self._name()} failed: {_first_line(exc)}"
                                f"{f' [SQLSTATE {exc.sqlstate}]' if exc.sqlstate else ''}",
                                exc.sqlstate) from None

    def _write_until_bad_row(self, rows: list) -> None:
        """Write rows one by one in arrival order; commit those before the bad one, name it."""
        done, bad = 0, None
        with self._conn.transaction():                      # commits rows[:done] at exit
            for values in rows:
                try:
                    with self._conn.transaction():          # a savepoint per row
                        self._conn.execute(self._statement, values)
                except psycopg.Error as exc:
                    if self._classify(exc) != "row":
                        raise
                    bad = (values, exc)
                    break
                done += 1
        self.rows_written += done
        for k in list(self._buffer)[:done]:
            del self._buffer[k]
        if bad is None:
            return
        values, exc = bad
        key = {k: values[self._cols.index(k)] for k in self._keys}
        diag = getattr(exc, "diag", None)
        column = getattr(diag, "column_name", None)
        if column is None:
            m = re.search(r"parameter \$(\d+)", str(exc))
            if m and int(m.group(1)) <= len(self._cols):
                column = self._cols[int(m.group(1)) - 1]
        if column is None and exc.sqlstate and exc.sqlstate.startswith("54"):
            column = next((k for k in self._keys), None)  # too big for the key's index
        constraint = getattr(diag, "constraint_name", None)
        reason = _first_line(exc) + (f" (constraint {constraint})" if constraint else "")
        raise BadRowError(
            f"row with {_describe(key)} rejected{self._where(column)}: "
            f"{reason} [SQLSTATE {exc.sqlstate}]; {done} row(s) before it in this flush were written "
            f"to {self._name()}, this row and later ones were not",
            key=key, column=column, sqlstate=exc.sqlstate)

    @staticmethod
    def _classify(exc: psycopg.Error) -> str:
        state = exc.sqlstate or ""
        if state[:2] in _ROW_CLASSES or state in _ROW_CODES:
            return "row"
        if isinstance(exc, psycopg.DataError) and not state:  # the driver could not encode a value
            return "row"
        if state in _RETRY_CODES or state.startswith("08") or isinstance(exc, psycopg.OperationalError):
            return "retry"
        return "permanent"

    def _rollback(self) -> None:
        try:
            self._conn.rollback()
        except psycopg.Error:
            pass

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * 2 ** attempt, self.backoff_max_ms)
        time.sleep(delay * random.uniform(0.5, 1.0) / 1000.0)

    def _connect_with_retries(self):
        for attempt in range(self.max_retries + 1):
            try:
                return psycopg.connect(self.dsn, autocommit=False, connect_timeout=10,
                                       application_name="readings-foreach-sink")
            except psycopg.OperationalError as exc:
                text = str(exc).lower()
                if attempt == self.max_retries or "authentication" in text or "does not exist" in text:
                    raise SinkError(f"cannot connect for {self._name()}: {_first_line(exc)}") from None
                self._sleep(attempt)

    def _load_table(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute(_COLUMNS_QUERY, {"table": self.table, "schema": self.schema})
            found = cur.fetchall()
        self._conn.rollback()
        if not found:
            raise SinkError(f"table {self._name()} not found")
        self._types = {name: cast for name, cast, _ in found}
        self._keys = tuple(name for name, _, is_key in found if is_key) or ("id",)

    def _build_statement(self):
        target = sql.Identifier(self.schema, self.table) if self.schema else sql.Identifier(self.table)
        updates = [c for c in self._cols if c not in self._keys]
        stmt = sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) ").format(
            t=target,
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in self._cols),
            vals=sql.SQL(", ").join(sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(self._types[c]))
                                    for c in self._cols),
            keys=sql.SQL(", ").join(sql.Identifier(k) for k in self._keys))
        if not updates:
            return stmt + sql.SQL("DO NOTHING")
        return stmt + sql.SQL("DO UPDATE SET {sets} WHERE ({old}) IS DISTINCT FROM ({new})").format(
            sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
            old=sql.SQL(", ").join(sql.SQL("t.{}::text").format(sql.Identifier(c)) for c in updates),
            new=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}::text").format(sql.Identifier(c)) for c in updates))


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
