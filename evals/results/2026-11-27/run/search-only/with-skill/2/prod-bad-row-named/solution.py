"""Foreach writer for the Postgres ``readings`` table that names every bad row by its id.

``ReadingsWriter(dsn, table)`` returns a picklable PySpark ``foreach`` writer
(``open``/``process``/``close``) for a real-time (or micro-batch) query that
upserts on ``id``:

    INSERT INTO readings (id, sensor, score, note) VALUES (...)
    ON CONFLICT (id) DO UPDATE SET sensor = EXCLUDED.sensor, ...

What happens to garbage (text with NUL bytes, NaN scores, absurdly long ids,
a NULL ``sensor``, ...):

* **Nothing is cleaned, cut or dropped.** Values are sent exactly as Spark gave
  them, each as a bound parameter cast to the column's type *without* a length
  modifier, so Postgres (the table's types and its ``CHECK``/``NOT NULL``
  constraints) decides what is acceptable, as for a plain ``INSERT``. Text that
  Postgres can never store (NUL ``\\x00``, lone surrogates) and a NULL id are
  refused in ``process()`` before anything is sent.
* **The error names the row.** The task fails with :class:`BadRowError`, whose
  message starts ``bad row id=<the id>`` and carries the column when known, the
  reason and the SQLSTATE; ``error.row_id`` holds the id. The same line is logged
  at ERROR on logger ``readings_writer`` on the executor at the moment it is
  found. A very long id is printed in full (plus its length), never shortened;
  an id with control characters is shown as a Python ``repr``.
* **Rows before it stay.** When a flush fails on a row-level error, the flush is
  rolled back and replayed row by row, in arrival order, each row under a
  savepoint: the rows that arrived before the bad one are committed, the bad row
  is rolled back and reported, and the rows after it are not written (Spark
  replays them, with the bad row, when the query is restarted, so the bad row is
  never skipped). Rows of earlier flushes were committed already.
* A NUL/surrogate row found in ``process()`` first commits every row buffered
  before it, then raises.

Delivery to ``foreach`` is at-least-once (a failed epoch is replayed, in
real-time mode the whole long batch); the upsert on ``id`` makes the replay
harmless. Rows are buffered one per id (last row wins), a full buffer
(``max_batch_rows``) is written sorted by id (so concurrent tasks lock rows in
one order and cannot deadlock) and a timer thread writes the buffer once its
oldest row is ``max_dwell_ms`` old, because under real-time mode ``close()``
runs only at the end of each long batch. Lost connections, server restarts,
deadlocks and serialization failures are retried with bounded, jittered
backoff; other errors fail at once. ``open()`` raises on failure and never
returns ``False`` (which would make Spark drop the partition's rows silently).

Requires ``psycopg`` 3 on the executors.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any, Optional, Sequence

log = logging.getLogger("readings_writer")

#: name, the cast that never narrows (domains resolved; ``bpchar`` not ``character``), full type, generated?
_COLUMNS_QUERY = """
SELECT a.attname,
       format_type(COALESCE(NULLIF(bt.typbasetype, 0), bt.oid), -1) AS cast_type,
       format_type(a.atttypid, a.atttypmod) AS full_type,
       (a.attgenerated <> '' OR a.attidentity = 'a') AS not_writable
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type bt ON bt.oid = a.atttypid
WHERE c.relname = %(table)s
  AND n.nspname = COALESCE(%(schema)s, current_schema())
  AND c.relkind IN ('r', 'p')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_RECONNECT_CODES = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}
_RETRY_CODES = {"40001", "40P01"}
# data exception, integrity violation, program limit (index row too big), datatype mismatch,
# cannot coerce, cardinality violation: the row is at fault, retrying cannot help.
_BAD_ROW_PREFIXES = ("22", "23", "54", "42804", "42846", "21000")


class SinkError(RuntimeError):
    """The sink could not write; the message says why."""

    def __init__(self, message: str, sqlstate: Optional[str] = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


class BadRowError(SinkError):
    """A row was refused. ``row_id`` is its id, ``column`` the column when known."""

    def __init__(self, message: str, row_id: Any = None, column: Optional[str] = None,
                 sqlstate: Optional[str] = None):
        super().__init__(message, sqlstate)
        self.row_id = row_id
        self.column = column

    def __reduce__(self):
        return (BadRowError, (str(self), self.row_id, self.column, self.sqlstate))


def _show_id(value: Any) -> str:
    """The id as it is (full length) when printable, else its ``repr``; long ids also get their length."""
    if isinstance(value, str) and value.isprintable():
        shown = value
    else:
        shown = repr(value)
    if isinstance(value, (str, bytes)) and len(value) > 200:
        shown += f" (length {len(value)})"
    return shown


def _split_table(table: str) -> tuple[Optional[str], str]:
    """``"readings"`` or ``"schema.readings"`` (unquoted parts folded to lower case, quoted kept)."""
    parts, cur, quoted, i = [], [], False, 0
    while i < len(table):
        ch = table[i]
        if ch == '"':
            if quoted and i + 1 < len(table) and table[i + 1] == '"':
                cur.append('"')
                i += 2
                continue
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch if quoted else ch.lower())
        i += 1
    parts.append("".join(cur))
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def _sqlstate(exc: BaseException) -> Optional[str]:
    return getattr(exc, "sqlstate", None)


def _kind(exc: BaseException) -> str:
    """'reconnect', 'retry', 'bad_row' or 'permanent'."""
    import psycopg

    state = _sqlstate(exc)
    if state:
        if state.startswith("08") or state in _RECONNECT_CODES:
            return "reconnect"
        if state in _RETRY_CODES:
            return "retry"
        if state.startswith(_BAD_ROW_PREFIXES):
            return "bad_row"
        return "permanent"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return "reconnect"
    if isinstance(exc, (psycopg.DataError, psycopg.ProgrammingError, TypeError, ValueError, OverflowError)):
        return "bad_row"  # psycopg could not send a value
    return "permanent"


def _text_problem(value: Any) -> Optional[str]:
    """Why Postgres text can never hold ``value`` (NUL, lone surrogate), or None."""
    if isinstance(value, str):
        if "\x00" in value:
            return "text contains a NUL byte (\\x00), which Postgres text cannot store"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "text contains a lone surrogate, which is not valid UTF-8"
    elif isinstance(value, (list, tuple)):
        for item in value:
            problem = _text_problem(item)
            if problem:
                return "array element: " + problem
    return None


class ReadingsWriter:
    """Picklable PySpark ``foreach`` writer: upsert on ``id``; a bad row fails the task naming its id."""

    def __init__(self, dsn: str, table: str = "readings", key_column: str = "id",
                 max_batch_rows: int = 1000, max_dwell_ms: int = 100, max_retries: int = 6,
                 backoff_initial_ms: int = 250, backoff_max_ms: int = 5000, connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.schema_name, self.table_name = _split_table(table)
        self.key_column = key_column
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = int(backoff_initial_ms)
        self.backoff_max_ms = int(backoff_max_ms)
        self.connect_timeout_s = int(connect_timeout_s)
        self._reset()

    _CONFIG = ("dsn", "table", "schema_name", "table_name", "key_column", "max_batch_rows",
               "max_dwell_ms", "max_retries", "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s")

    def __getstate__(self):
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._reset()

    def __repr__(self):
        return f"ReadingsWriter(table={self.table!r})"

    def _reset(self):
        self._conn = None
        self._lock = threading.RLock()
        self._buffer: dict = {}   # id -> row tuple, in arrival order (a re-sent id moves to the end)
        self._oldest = None
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._timer: Optional[threading.Thread] = None
        self._columns: Optional[list] = None
        self._casts: dict = {}
        self._full_types: dict = {}
        self._not_writable: set = set()
        self._statement = None
        self._key_index = 0
        self._open = False
        self.partition_id = self.epoch_id = None
        self.rows_written = 0

    # ---- foreach contract -------------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        """Connect (with retries), read the column types; raise on failure, never return False."""
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect_with_retries()
        self._read_columns()
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name=f"readings-flush-p{partition_id}")
            self._timer.start()
        return True

    def process(self, row):
        if not self._open:
            raise SinkError("process() called on a writer that is not open; the row was not written")
        self._raise_stored()
        values = self._values(row)
        row_id = values[self._key_index]
        problem = None
        if row_id is None:
            problem = (self.key_column, "the id is NULL; a row without an id cannot be upserted")
        else:
            for column, value in zip(self._columns, values):
                text = _text_problem(value)
                if text:
                    problem = (column, text)
                    break
        if problem is not None:
            with self._lock:  # keep everything that came before this row
                self._flush_locked()
            self._raise_stored()
            error = self._bad_row(row_id, problem[0], problem[1] + "; refused before sending", None)
            log.error("%s", error)
            raise error
        with self._lock:
            if not self._buffer:
                self._oldest = time.monotonic()
            self._buffer.pop(row_id, None)
            self._buffer[row_id] = values
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()
        self._raise_stored()

    def close(self, error):
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=120)
        try:
            if error is None:
                self._raise_stored()
                with self._lock:
                    self._flush_locked()
                self._raise_stored()
            else:
                with self._lock:  # Spark replays the epoch
                    self._buffer.clear()
        finally:
            self._close_quietly()

    # ---- internals --------------------------------------------------------------------------
    def _raise_stored(self):
        if self._error is not None:
            raise self._error

    def _timer_loop(self):
        period = max(self.max_dwell_ms / 4000.0, 0.001)
        while not self._stop.wait(period):
            if self._error is not None:
                return
            with self._lock:
                if self._buffer and self._oldest is not None and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or close()
                        log.error("postgres sink: flush failed, nothing more is written: %s", exc)
                        self._error = exc
                        return

    def _connect_with_retries(self):
        import psycopg

        attempt = 0
        while True:
            try:
                return psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                       application_name="spark-readings-sink")
            except Exception as exc:
                state = _sqlstate(exc)
                text = str(exc).lower()
                refused = (state or "").startswith("28") or state in ("3D000", "42501") or any(
                    s in text for s in ("password authentication failed", "no pg_hba.conf entry",
                                        "does not exist", "permission denied"))
                if refused or attempt >= self.max_retries:
                    raise SinkError(f"could not connect to Postgres after {attempt + 1} attempt(s): "
                                    f"{type(exc).__name__}: {exc}", state) from None
                self._sleep(attempt)
                attempt += 1

    def _sleep(self, attempt: int):
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * random.uniform(0.5, 1.0))

    def _read_columns(self):
        rows = self._conn.execute(_COLUMNS_QUERY, {"table": self.table_name,
                                                   "schema": self.schema_name}).fetchall()
        self._conn.rollback()
        if not rows:
            raise SinkError(f"table {self.table!r} not found")
        self._casts = {r[0]: r[1] for r in rows}
        self._full_types = {r[0]: r[2] for r in rows}
        self._not_writable = {r[0] for r in rows if r[3]}
        if self.key_column not in self._casts:
            raise SinkError(f"key column {self.key_column!r} is not a column of {self.table!r}")

    def _values(self, row) -> tuple:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if self._columns is None:
            unknown = [c for c in data if c not in self._casts]
            if unknown:
                raise SinkError(f"row field(s) {unknown} are not columns of {self.table!r}")
            generated = [c for c in data if c in self._not_writable]
            if generated:
                raise SinkError(f"column(s) {generated} of {self.table!r} are generated; leave them out")
            if self.key_column not in data:
                raise SinkError(f"rows must carry the key column {self.key_column!r}")
            self._columns = list(data)
            self._key_index = self._columns.index(self.key_column)
            self._statement = self._upsert_statement(self._columns)
        missing = [c for c in self._columns if c not in data]
        if missing or len(data) != len(self._columns):
            extra = [c for c in data if c not in self._columns]
            raise self._bad_row(data.get(self.key_column), (missing or extra)[0],
                                f"row fields differ from the first row's (missing {missing}, extra {extra})", None)
        return tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v
                     for v in (data[c] for c in self._columns))

    def _upsert_statement(self, columns: Sequence[str]):
        from psycopg import sql

        target = sql.Identifier(self.schema_name, self.table_name) if self.schema_name \
            else sql.Identifier(self.table_name)
        values = sql.SQL(", ").join(
            sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(self._casts[c])) for c in columns)
        updates = [c for c in columns if c != self.key_column]
        statement = sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({key}) ").format(
            t=target, cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns), vals=values,
            key=sql.Identifier(self.key_column))
        if not updates:
            return statement + sql.SQL("DO NOTHING")
        return statement + sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)

    def _bad_row(self, row_id: Any, column: Optional[str], reason: str,
                 sqlstate: Optional[str]) -> BadRowError:
        where = f" at column {column} ({self._full_types.get(column, '?')})" if column else ""
        code = f" [SQLSTATE {sqlstate}]" if sqlstate else ""
        return BadRowError(f"bad row id={_show_id(row_id)} rejected by {self.table}{where}: {reason}{code}; "
                           "the row was not written, altered or skipped (rows before it are committed; "
                           "fix or remove it upstream, then restart: Spark replays it)",
                           row_id=row_id, column=column, sqlstate=sqlstate)

    def _flush_locked(self):
        """One transaction, sorted by id; on a row-level error, keep the rows before the bad one."""
        if not self._buffer:
            return
        arrival = list(self._buffer.values())
        rows = sorted(arrival, key=lambda r: r[self._key_index])
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect_with_retries()
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                break
            except SinkError:
                raise
            except Exception as exc:
                self._rollback_quietly()
                kind = _kind(exc)
                if kind == "bad_row":
                    error = self._write_until_bad_row(arrival, exc)
                    self._buffer.clear()
                    self._oldest = None
                    log.error("%s", error)
                    raise error from None
                if kind == "permanent" or attempt >= self.max_retries:
                    raise SinkError(f"flush of {len(rows)} row(s) to {self.table!r} failed after "
                                    f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}",
                                    _sqlstate(exc)) from None
                if kind == "reconnect":
                    self._close_quietly()
                self._sleep(attempt)
                attempt += 1
        self.rows_written += len(rows)
        self._buffer.clear()
        self._oldest = None

    def _write_until_bad_row(self, arrival: list, batch_error: BaseException) -> SinkError:
        """Row by row in arrival order under savepoints: commit the rows before the bad one, name it."""
        conn = self._conn
        bad = None
        try:
            with conn.cursor() as cur:
                for values in arrival:
                    cur.execute("SAVEPOINT sink_row")
                    try:
                        cur.execute(self._statement, values)
                    except Exception as row_exc:
                        if _kind(row_exc) != "bad_row":
                            raise
                        cur.execute("ROLLBACK TO SAVEPOINT sink_row")
                        bad = (values, row_exc)
                        break
                    cur.execute("RELEASE SAVEPOINT sink_row")
            conn.commit()  # the rows that came before the bad one stay
        except Exception as exc:
            self._rollback_quietly()
            return SinkError(f"flush to {self.table!r} failed ({type(batch_error).__name__}: {batch_error}) and "
                             f"finding the row failed too ({type(exc).__name__}: {exc}); nothing of this flush "
                             "was written", _sqlstate(batch_error))
        if bad is None:
            return SinkError(f"flush to {self.table!r} failed but no single row fails alone: "
                             f"{type(batch_error).__name__}: {batch_error}", _sqlstate(batch_error))
        values, row_exc = bad
        column = getattr(getattr(row_exc, "diag", None), "column_name", None)
        if column is None:
            column = self._guess_column(values, row_exc)
        reason = str(row_exc).strip().splitlines()[0] if str(row_exc).strip() else type(row_exc).__name__
        return self._bad_row(values[self._key_index], column, reason, _sqlstate(row_exc))

    def _guess_column(self, values: tuple, exc: BaseException) -> Optional[str]:
        """The column a client-side or constraint error points at, when the server did not say."""
        constraint = getattr(getattr(exc, "diag", None), "constraint_name", None) or ""
        for column in self._columns or ():
            if column and constraint and column in constraint:
                return column
        for column, value in zip(self._columns or (), values):
            if isinstance(value, float) and math.isnan(value) and "nan" in str(exc).lower():
                return column
        return None

    def _rollback_quietly(self):
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            self._close_quietly()

    def _close_quietly(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


__all__ = ["ReadingsWriter", "BadRowError", "SinkError"]
