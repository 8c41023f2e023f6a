"""Exact-value foreach writer for the Postgres ``ledger`` table (PySpark Structured Streaming).

``LedgerWriter(dsn, table)`` returns a picklable ``foreach`` writer
(``open``/``process``/``close``) that upserts every row on ``id`` and stores every
value exactly as Spark handed it to Python, NULLs included:

==================  ======================  =========================================================
Postgres column     Spark type / Python     how it is sent (psycopg 3, one query parameter each)
==================  ======================  =========================================================
numeric(38,18)      DecimalType -> Decimal  as the Decimal's own text, cast to ``numeric`` (never float)
timestamp(6)        TimestampType -> naive  the naive ``datetime`` with all 6 microsecond digits, cast to
                    ``datetime``            ``timestamp`` (no zone conversion, no epoch float)
date                DateType -> ``date``    ``date``
uuid                StringType -> ``str``   text, cast to ``uuid`` by Postgres
jsonb               StringType -> ``str``   text, cast to ``jsonb`` by Postgres
bytea               BinaryType -> bytearray bytes, as ``bytea``
text[]              ArrayType(String)->list array literal built by psycopg (NULL elements kept), cast to
                                            ``text[]``
text / boolean /    String/Boolean/Long/    text, bool, int (exact), float (``repr``: shortest exact
bigint / float8     Double                  round-trip form; NaN/Infinity kept)
==================  ======================  =========================================================

What the auditors saw in the old sink comes from converting values on the way:
a Decimal that became a ``float`` (15-17 significant digits, so a
``numeric(38,18)`` loses its last digits) and a timestamp that went through a
float epoch or a millisecond type (``java.sql.Timestamp`` via JDBC, ``epoch
* 1000``). Here no value is converted: each one is a bound parameter of its own
Python type, and every parameter is cast to the column's type **without its
modifier** (``numeric``, not ``numeric(38,18)``; ``bpchar``, not ``character``),
read from the catalog at ``open()``. The assignment into the column then applies
the column's precision, scale and length exactly as a plain parameterised
``INSERT`` does, and refuses (instead of cutting) what does not fit.

Timestamp note: PySpark gives a ``TimestampType`` value to Python as a naive
``datetime`` in the executor's local time zone (``datetime.fromtimestamp``). A
``timestamp`` (without time zone) column stores that wall-clock time as it is;
keep the executor's ``TZ`` equal to ``spark.sql.session.timeZone`` (UTC is
the usual production choice), or cast the column to ``TIMESTAMP_NTZ`` in Spark
before the sink, if the wall clock must be the session's. For a ``timestamptz``
column the writer attaches the executor's zone (keeping a DST ``fold``) so the
instant is exact whatever the Postgres session's ``TimeZone``.

Delivery to ``foreach`` is at-least-once (a failed epoch is replayed, in
real-time mode the whole long batch): the upsert ``INSERT ... ON CONFLICT (id)
DO UPDATE`` makes a replay harmless. Rows are buffered one per key (last row
wins, so one statement never touches a key twice), flushed sorted by key (no
deadlocks between tasks) every ``max_batch_rows`` keys **or** when the oldest
buffered row is ``max_dwell_ms`` old, from a timer thread, because under
real-time mode ``close()`` only runs at the end of each long batch. Lost
connections, server restarts, serialization failures and deadlocks are retried
with bounded jittered backoff; a value Postgres refuses fails the task with an
error naming the row's key and the SQLSTATE, and nothing of that flush is
written. ``open()`` raises on failure and never returns ``False`` (that would
make Spark drop the partition's rows silently).

Requires ``psycopg`` (3.x) on the executors.

Usage::

    query = (ledger_df.writeStream
             .foreach(LedgerWriter(dsn, "ledger"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")
             .start())
"""

from __future__ import annotations

import datetime as _dt
import logging
import random
import threading
import time
from decimal import Decimal
from typing import Any, Optional, Sequence

log = logging.getLogger("ledger_writer")

#: One row per column: name, the cast that never narrows (domains resolved to their base type,
#: ``bpchar`` rather than ``character`` = char(1)), whether it is an array, whether it is generated.
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

# SQLSTATEs worth a retry: connection broken / server restarting / read-only standby after fail-over
# (reconnect), serialization failure and deadlock (same connection).
_RECONNECT_CLASSES = ("08",)
_RECONNECT_CODES = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}
_RETRY_CODES = {"40001", "40P01"}
# Data / constraint errors: a bad row. Never retried.
_BAD_ROW_CLASSES = ("22", "23", "42804", "42846", "21000", "54")


class LedgerSinkError(RuntimeError):
    """The sink could not write; ``key`` names the offending row when one row is to blame."""

    def __init__(self, message: str, key: Any = None, sqlstate: Optional[str] = None):
        super().__init__(message)
        self.key = key
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.key, self.sqlstate))


def _split_table(table: str) -> tuple[Optional[str], str]:
    """``"ledger"`` or ``"schema.ledger"`` (unquoted parts folded to lower case, quoted kept)."""
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
        if state.startswith(_RECONNECT_CLASSES) or state in _RECONNECT_CODES:
            return "reconnect"
        if state in _RETRY_CODES:
            return "retry"
        if state.startswith(_BAD_ROW_CLASSES) or state in _BAD_ROW_CLASSES:
            return "bad_row"
        return "permanent"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return "reconnect"
    if isinstance(exc, (psycopg.DataError, TypeError, ValueError, OverflowError)):
        return "bad_row"  # psycopg could not encode a value
    return "permanent"


class _ExactUpsertWriter:
    """Picklable PySpark ``foreach`` writer: exact-value, idempotent batched upserts into Postgres."""

    def __init__(self, dsn: str, table: str, key_columns: Sequence[str] = ("id",),
                 max_batch_rows: int = 1000, max_dwell_ms: int = 100, max_retries: int = 6,
                 backoff_initial_ms: int = 250, backoff_max_ms: int = 5000, connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if not key_columns:
            raise ValueError("key_columns must name the conflict key (the table's primary key)")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.schema_name, self.table_name = _split_table(table)
        self.key_columns = tuple(key_columns)
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = int(backoff_initial_ms)
        self.backoff_max_ms = int(backoff_max_ms)
        self.connect_timeout_s = int(connect_timeout_s)
        self._reset()

    # ---- only the configuration travels to the executors -------------------------------------
    _CONFIG = ("dsn", "table", "schema_name", "table_name", "key_columns", "max_batch_rows",
               "max_dwell_ms", "max_retries", "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s")

    def __getstate__(self):
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._reset()

    def __repr__(self):
        return f"{type(self).__name__}(table={self.table!r}, key_columns={self.key_columns!r})"

    def _reset(self):
        self._conn = None
        self._lock = threading.RLock()
        self._buffer: dict = {}        # key tuple -> row tuple (one row per key, last wins)
        self._oldest = None            # monotonic time of the oldest buffered row
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._timer: Optional[threading.Thread] = None
        self._columns: Optional[list] = None  # the row's columns, fixed by the first row
        self._casts: dict = {}         # column -> cast type
        self._kinds: dict = {}         # column -> full type
        self._statement = None
        self._key_index: tuple = ()
        self._open = False
        self.partition_id = self.epoch_id = None
        self.rows_written = 0

    # ---- the foreach contract ---------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        """Connect (with retries) and read the table's column types. Raises; never returns False."""
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect_with_retries()
        self._read_columns()
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name=f"ledger-flush-p{partition_id}")
            self._timer.start()
        return True

    def process(self, row):
        if not self._open:
            raise LedgerSinkError("process() called on a writer that is not open; the row was not written")
        self._raise_stored()
        values = self._values(row)
        key = tuple(values[i] for i in self._key_index)
        if any(k is None for k in key):
            raise LedgerSinkError(f"row with a NULL key {dict(zip(self.key_columns, key))!r} cannot be upserted",
                                  key=key)
        with self._lock:
            if not self._buffer:
                self._oldest = time.monotonic()
            self._buffer[key] = values
            full = len(self._buffer) >= self.max_batch_rows
            if full:
                self._flush_locked()
        self._raise_stored()

    def close(self, error):
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=60)
        try:
            if error is None:
                self._raise_stored()
                with self._lock:
                    self._flush_locked()
                self._raise_stored()
            else:
                # Spark replays the epoch: drop what was not written.
                with self._lock:
                    self._buffer.clear()
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # closing a broken connection
                    pass

    # ---- internals --------------------------------------------------------------------------
    def _raise_stored(self):
        if self._error is not None:
            raise self._error

    def _timer_loop(self):
        """Flush the buffer once its oldest row is ``max_dwell_ms`` old, even if no row follows."""
        period = max(self.max_dwell_ms / 4000.0, 0.001)
        while not self._stop.wait(period):
            if self._error is not None:
                return
            with self._lock:
                if self._buffer and self._oldest is not None and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # stored, raised by the next process()/close()
                        log.error("postgres sink: flush failed: %s", exc)
                        self._error = exc
                        return

    def _connect(self):
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                               application_name="spark-ledger-sink")
        return conn

    def _connect_with_retries(self):
        attempt = 0
        while True:
            try:
                return self._connect()
            except Exception as exc:
                state = _sqlstate(exc)
                text = str(exc).lower()
                refused_login = (state or "").startswith("28") or state in ("3D000", "42501") or any(
                    s in text for s in ("password authentication failed", "no pg_hba.conf entry",
                                        "does not exist", "permission denied"))
                if refused_login or attempt >= self.max_retries:
                    raise LedgerSinkError(f"could not connect to Postgres after {attempt + 1} attempt(s): "
                                          f"{type(exc).__name__}: {exc}", sqlstate=state) from None
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
            raise LedgerSinkError(f"table {self.table!r} not found (create it first, with PRIMARY KEY (id))")
        self._casts = {r[0]: r[1] for r in rows}
        self._kinds = {r[0]: r[2] for r in rows}
        self._not_writable = {r[0] for r in rows if r[3]}
        missing = [k for k in self.key_columns if k not in self._casts]
        if missing:
            raise LedgerSinkError(f"key column(s) {missing} not in table {self.table!r}")

    def _values(self, row) -> tuple:
        """The row's values in the sink's column order, matched by field name on every row."""
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if self._columns is None:
            unknown = [c for c in data if c not in self._casts]
            if unknown:
                raise LedgerSinkError(f"row field(s) {unknown} are not columns of {self.table!r}")
            generated = [c for c in data if c in self._not_writable]
            if generated:
                raise LedgerSinkError(f"column(s) {generated} of {self.table!r} are generated; drop them")
            self._columns = list(data)
            self._key_index = tuple(self._columns.index(k) for k in self.key_columns)
            self._statement = self._upsert_statement(self._columns)
        try:
            return tuple(self._convert(c, data[c]) for c in self._columns)
        except KeyError as exc:
            raise LedgerSinkError(f"row is missing column {exc.args[0]!r}") from None

    def _convert(self, column: str, value: Any) -> Any:
        """Only what keeps the value exact; everything else goes as the Python value Spark gave."""
        if value is None:
            return None
        cast = self._casts[column]
        if cast == "bytea" and isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        if cast == "numeric" and isinstance(value, float):
            return Decimal(repr(value))  # never through binary float arithmetic
        if cast == "timestamp with time zone" and isinstance(value, _dt.datetime) and value.tzinfo is None:
            return value.astimezone()  # PySpark's naive local datetime -> the same instant, fold kept
        return value

    def _upsert_statement(self, columns: Sequence[str]):
        from psycopg import sql

        target = sql.Identifier(self.schema_name, self.table_name) if self.schema_name \
            else sql.Identifier(self.table_name)
        placeholders = sql.SQL(", ").join(
            sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(self._casts[c])) for c in columns)
        updates = [c for c in columns if c not in self.key_columns]
        statement = sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) ").format(
            t=target, cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns), vals=placeholders,
            keys=sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns))
        if not updates:
            return statement + sql.SQL("DO NOTHING")
        return statement + sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)

    def _flush_locked(self):
        """Write the buffer as one transaction, sorted by key; retry what retrying can fix."""
        if not self._buffer:
            return
        rows = [self._buffer[k] for k in sorted(self._buffer, key=_sort_key)]
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect_with_retries()
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                break
            except LedgerSinkError:
                raise
            except Exception as exc:
                self._rollback_quietly()
                kind = _kind(exc)
                if kind == "bad_row":
                    raise self._name_bad_row(rows, exc) from None
                if kind == "permanent" or attempt >= self.max_retries:
                    raise LedgerSinkError(f"flush of {len(rows)} row(s) to {self.table!r} failed after "
                                          f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}",
                                          sqlstate=_sqlstate(exc)) from None
                if kind == "reconnect":
                    self._close_quietly()
                self._sleep(attempt)
                attempt += 1
        self.rows_written += len(rows)
        self._buffer.clear()
        self._oldest = None

    def _name_bad_row(self, rows, exc) -> LedgerSinkError:
        """Replay the flush row by row in a rolled-back transaction to name the row Postgres refuses."""
        try:
            with self._conn.cursor() as cur:
                for r in rows:
                    try:
                        cur.execute("SAVEPOINT probe")
                        cur.execute(self._statement, r)
                        cur.execute("RELEASE SAVEPOINT probe")
                    except Exception as row_exc:
                        key = dict(zip(self.key_columns, (r[i] for i in self._key_index)))
                        self._rollback_quietly()
                        return LedgerSinkError(
                            f"row with key {key!r} rejected by {self.table!r}: {type(row_exc).__name__}: "
                            f"{row_exc} [SQLSTATE {_sqlstate(row_exc)}]; nothing of its flush was written",
                            key=key, sqlstate=_sqlstate(row_exc))
        except Exception:
            pass
        self._rollback_quietly()
        return LedgerSinkError(f"flush to {self.table!r} rejected: {type(exc).__name__}: {exc}; "
                               "nothing of it was written", sqlstate=_sqlstate(exc))

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


def _sort_key(key: tuple):
    return tuple((v is None, str(type(v)), v) for v in key)


class LedgerWriter(_ExactUpsertWriter):
    """``LedgerWriter(dsn, table)``: the foreach writer for the ledger table, upsert on ``id``."""

    def __init__(self, dsn: str, table: str = "ledger", **options):
        options.setdefault("key_columns", ("id",))
        super().__init__(dsn, table, **options)


__all__ = ["LedgerWriter", "LedgerSinkError"]
