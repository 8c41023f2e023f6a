"""Type-exact, idempotent foreach writer for the ``ledger`` table.

    from solution import LedgerWriter
    query = (df.writeStream
             .foreach(LedgerWriter(dsn, "ledger"))
             .outputMode("update")                 # real-time mode accepts update only
             .option("checkpointLocation", ckpt)
             .trigger(realTime="5 minutes")        # a checkpoint interval, not a latency
             .start())

Why the old sink drifted, and what this writer does instead
------------------------------------------------------------
* ``amount`` (DecimalType(38,18)) reaches Python as ``decimal.Decimal`` with all
  18 digits.  It is bound as a Decimal (psycopg sends ``numeric``), never through
  ``float`` and never formatted into the SQL text; a ``float`` that shows up in a
  numeric column is refused instead of being rounded silently.
* ``at`` (TimestampType) reaches Python as a naive ``datetime`` with its
  microseconds (PySpark converts the instant to the Python worker's local wall
  clock).  It is bound as a ``datetime`` into ``timestamp`` - no ``str()``/
  ``strftime`` with milliseconds, no epoch float, no ``timestamptz`` parameter that
  the session's TimeZone could shift.  See the note on zones at the bottom.
* Every parameter gets an explicit cast to its column's type *without* a type
  modifier (``numeric``, ``timestamp``, ``uuid``, ``jsonb``, ``bytea``, ``text[]``,
  read from the catalog), so nothing is narrowed by the cast; the assignment into
  ``numeric(38,18)``/``timestamp(6)`` then applies exactly what a plain INSERT does.
* ``None`` is bound as SQL NULL for every column, including inside ``tags``
  (``[None, "x"]`` is stored as ``{NULL,x}``, an empty list as ``{}``, a null
  array as NULL - three different things that all round-trip).
* ``blob`` (BinaryType arrives as ``bytearray``) is sent as bytes, not text.
* ``ratio`` (DoubleType) is sent in binary, so every bit round-trips
  (NaN, +/-Infinity and -0.0 included).
* Upsert: ``INSERT ... ON CONFLICT (id) DO UPDATE``; an update that would change
  nothing is skipped (no new tuple), so a replayed epoch is harmless.
  Delivery to foreach is at-least-once; the upsert on ``id`` makes replays idempotent.

Real-time mode: ``open()``/``close()`` run once per long batch, so rows are
flushed from ``process()`` (every ``max_batch_rows`` distinct keys) and by a
timer thread (when the oldest buffered row is ``max_dwell_ms`` old), not only in
``close()``.  ``open()`` never returns ``False`` (that would drop the partition's
rows silently): it returns ``True`` or raises.

SQL is composed with ``psycopg.sql`` identifiers and bound parameters only.

Zones: ``timestamp(6)`` holds a wall clock, Spark's TimestampType an instant.
PySpark hands the foreach writer the instant as a naive wall-clock ``datetime``
in the Python worker's local zone, and that is the value stored (and read back).
Run executors and the Spark session in the same zone (UTC is the safe choice:
``spark.sql.session.timeZone=UTC`` and ``TZ=UTC`` for the executors /
``spark.executorEnv.TZ=UTC``) so that Spark SQL, the writer and Postgres all show
the same wall clock; or cast to TIMESTAMP_NTZ upstream.  (A ``timestamptz`` column
would hold the instant itself: for one, the writer sends the value with the
worker's offset, so no zone setting can move it.)
Two caveats that are properties of the column types, not of this writer:
``jsonb`` stores the JSON *value* (whitespace and key order of the text are not
kept; compare parsed JSON), and ``uuid`` reads back in canonical lower-case form.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import logging
import math
import random
import re
import threading
import time
import uuid as _uuid
from typing import Any, Sequence

import psycopg
from psycopg import sql

log = logging.getLogger("ledger_writer")

# The ledger's columns and the Python values PySpark hands over for its Spark types.
LEDGER_COLUMNS = ("id", "amount", "at", "day", "ref", "doc", "blob", "tags",
                  "note", "flag", "n", "ratio")

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
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


class BadRowError(ValueError):
    """A row the table cannot hold exactly; names the key and the column."""


class _Transient(Exception):
    pass


def _check_value(column: str, cast_type: str, value: Any) -> Any:
    """Return the value to bind, or raise if binding it would change it."""
    if value is None:
        return None
    t = cast_type
    if t.endswith("[]"):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"expected a list for {t}, got {type(value).__name__}")
        return [_check_value(column, t[:-2], v) for v in value]
    if t == "numeric":
        if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int)):
            # a float here has already lost digits; refuse rather than store a rounded amount
            raise TypeError(f"expected Decimal for numeric, got {type(value).__name__}")
        return value
    if t in ("bigint", "integer", "smallint"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected int for {t}, got {type(value).__name__}")
        return value
    if t in ("double precision", "real"):
        if isinstance(value, bool) or not isinstance(value, (float, int)):
            raise TypeError(f"expected float for {t}, got {type(value).__name__}")
        return float(value)
    if t == "boolean":
        if not isinstance(value, bool):
            raise TypeError(f"expected bool, got {type(value).__name__}")
        return value
    if t.startswith("timestamp"):
        if not isinstance(value, _dt.datetime):
            raise TypeError(f"expected datetime for {t}, got {type(value).__name__}")
        if t == "timestamp without time zone" and value.tzinfo is not None:
            raise TypeError("aware datetime for a timestamp without time zone column")
        if t == "timestamp with time zone" and value.tzinfo is None:
            # PySpark made this naive value in the worker's local zone: send it with
            # that offset (fold kept) so Postgres' TimeZone setting cannot move it
            return value.astimezone()
        return value
    if t == "date":
        if isinstance(value, _dt.datetime) or not isinstance(value, _dt.date):
            raise TypeError(f"expected date, got {type(value).__name__}")
        return value
    if t == "bytea":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes for bytea, got {type(value).__name__}")
        return bytes(value)
    if t == "uuid":
        if isinstance(value, _uuid.UUID):
            return value
        if not isinstance(value, str):
            raise TypeError(f"expected str for uuid, got {type(value).__name__}")
        return _uuid.UUID(value)  # raises ValueError for a malformed UUID
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError("text contains a NUL character, which Postgres text cannot store")
        return value
    return value


class LedgerWriter:
    """PySpark ``foreach`` writer: upsert on the primary key (``id``), values exact.

    Picklable: only settings travel to the executors; connection, buffer and
    timer thread are created in ``open()``.
    """

    def __init__(self, dsn: str, table: str = "ledger", *, key_columns: Sequence[str] = (),
                 max_batch_rows: int = 1000, max_dwell_ms: int = 100, max_retries: int = 5,
                 backoff_initial_ms: int = 250, backoff_max_ms: int = 5000):
        if not dsn:
            raise ValueError("dsn is required")
        parts = table.split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
        self.dsn = dsn
        self.schema, self.table = (parts if len(parts) == 2 else (None, parts[0]))
        self.key_columns = tuple(key_columns)
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._reset_runtime()

    # -- pickling: only settings go to executors --------------------------------
    def _reset_runtime(self) -> None:
        self._conn = None
        self._lock = None
        self._buffer: dict = {}
        self._oldest = None
        self._error: BaseException | None = None
        self._stop = None
        self._timer = None
        self._cols: list[str] = []
        self._types: dict[str, str] = {}
        self._statement = None
        self._opened = False

    def __getstate__(self):
        keep = ("dsn", "schema", "table", "key_columns", "max_batch_rows", "max_dwell_ms",
                "max_retries", "backoff_initial_ms", "backoff_max_ms")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self):  # never prints the DSN (it may hold a password)
        return f"LedgerWriter(table={self._qualified_name()!r})"

    def _qualified_name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    # -- Spark's foreach contract ------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("open() called twice without close()")
        self._conn = self._connect_with_retries()
        try:
            self._load_table()
        except BaseException:
            self._conn.close()  # Spark calls no close() when open() raises
            self._conn = None
            raise
        self._lock = threading.Lock()
        self._buffer, self._oldest, self._error = {}, None, None
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="ledger-flush", daemon=True)
        self._timer.start()
        self._opened = True
        return True  # never False: that would drop this partition's rows without an error

    def process(self, row) -> None:
        if not self._opened:
            raise RuntimeError("process() before open()")
        self._raise_stored_error()
        values = self._row_values(row)
        key = tuple(values[self._cols.index(k)] for k in self.key_columns)
        with self._lock:
            self._buffer.pop(key, None)     # last row for a key wins; one statement never
            self._buffer[key] = values      # touches a key twice
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error) -> None:
        if not self._opened:
            return
        self._opened = False
        self._stop.set()
        self._timer.join(timeout=30)
        try:
            if error is None:
                with self._lock:
                    if self._error is None and self._buffer:
                        self._flush_locked()
                self._raise_stored_error()
            # with an error, unwritten rows are dropped: Spark replays the epoch
        finally:
            try:
                self._conn.close()
            finally:
                self._conn = None

    # -- internals ---------------------------------------------------------------
    def _raise_stored_error(self) -> None:
        if self._error is not None:
            err = self._error
            raise err

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None or not self._buffer:
                    continue
                if (time.monotonic() - self._oldest) * 1000.0 < self.max_dwell_ms:
                    continue
                try:
                    self._flush_locked()
                except BaseException as exc:  # kept and raised by the next process()/close()
                    log.error("ledger flush failed: %s", exc)
                    self._error = exc

    def _connect(self):
        return psycopg.connect(self.dsn, autocommit=False, application_name="ledger-foreach-sink")

    def _connect_with_retries(self):
        for attempt in range(self.max_retries + 1):
            try:
                return self._connect()
            except psycopg.OperationalError:
                if attempt == self.max_retries:
                    raise
                self._sleep(attempt)

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms)
        time.sleep(delay * random.uniform(0.5, 1.0) / 1000.0)

    def _load_table(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute(_COLUMNS_QUERY, {"table": self.table, "schema": self.schema})
            found = cur.fetchall()
        self._conn.rollback()
        if not found:
            raise RuntimeError(f"table {self._qualified_name()} not found")
        self._types = {name: cast for name, cast, _ in found}
        if not self.key_columns:
            self.key_columns = tuple(name for name, _, is_key in found if is_key) or ("id",)
        missing = [k for k in self.key_columns if k not in self._types]
        if missing:
            raise RuntimeError(f"key column(s) {missing} not in {self._qualified_name()}")

    def _row_values(self, row) -> list:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if not self._cols:  # first row fixes the columns (matched by name, not position)
            unknown = [f for f in data if f not in self._types]
            if unknown:
                raise BadRowError(f"field(s) {unknown} have no column in {self._qualified_name()}")
            self._cols = [c for c in self._types if c in data]
            self._statement = self._build_statement()
        try:
            values = [data[c] for c in self._cols]
        except KeyError as exc:
            raise BadRowError(f"row is missing column {exc.args[0]}") from None
        if set(data) - set(self._cols):
            raise BadRowError(f"row has fields {sorted(set(data) - set(self._cols))} the first row had not")
        for k in self.key_columns:
            if data.get(k) is None:
                raise BadRowError(f"row with a null key column {k}")
        out = []
        for c, v in zip(self._cols, values):
            try:
                out.append(_check_value(c, self._types[c], v))
            except (TypeError, ValueError) as exc:
                key = ", ".join(f"{k}={data.get(k)!r}" for k in self.key_columns)
                raise BadRowError(f"row with key {key} rejected at column {c} "
                                  f"({self._types[c]}): {exc}") from None
        return out

    def _build_statement(self):
        ident = (sql.Identifier(self.schema, self.table) if self.schema
                 else sql.Identifier(self.table))
        cols = [sql.Identifier(c) for c in self._cols]
        casts = [sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(self._types[c]))
                 for c in self._cols]  # format_type(...) output of the catalog, no modifier
        updates = [c for c in self._cols if c not in self.key_columns]
        stmt = sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) ").format(
            t=ident, cols=sql.SQL(", ").join(cols), vals=sql.SQL(", ").join(casts),
            keys=sql.SQL(", ").join(sql.Identifier(k) for k in self.key_columns))
        if not updates:
            return stmt + sql.SQL("DO NOTHING")
        stmt += sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)
        # skip no-op updates (a replay): compare the stored text forms, which differ
        # exactly when the stored values differ (numeric/jsonb/float '=' is looser)
        stmt += sql.SQL(" WHERE ({old}) IS DISTINCT FROM ({new})").format(
            old=sql.SQL(", ").join(sql.SQL("t.{}::text").format(sql.Identifier(c)) for c in updates),
            new=sql.SQL(", ").join(sql.SQL("EXCLUDED.{}::text").format(sql.Identifier(c)) for c in updates))
        return stmt

    def _flush_locked(self) -> None:
        """Write the buffer in one transaction; retried on a lost connection."""
        rows = [self._buffer[k] for k in sorted(self._buffer, key=_sort_key)]  # stable lock order
        for attempt in range(self.max_retries + 1):
            try:
                with self._conn.cursor(binary=True) as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                break
            except (psycopg.OperationalError, psycopg.errors.SerializationFailure,
                    psycopg.errors.DeadlockDetected) as exc:
                self._rollback_quietly()
                if attempt == self.max_retries:
                    raise
                log.warning("ledger flush retry %d after %s", attempt + 1, type(exc).__name__)
                self._sleep(attempt)
                if self._conn.closed or self._conn.broken:
                    self._conn = self._connect_with_retries()
            except psycopg.Error as exc:
                self._rollback_quietly()
                raise BadRowError(self._diagnose(rows, exc)) from None
        self._buffer.clear()
        self._oldest = None

    def _rollback_quietly(self) -> None:
        try:
            self._conn.rollback()
        except psycopg.Error:
            pass

    def _diagnose(self, rows, exc) -> str:
        """Find the row that Postgres refuses so the message names its key."""
        for r in rows:
            try:
                with self._conn.cursor(binary=True) as cur:
                    cur.execute(self._statement, r)
            except psycopg.Error as row_exc:
                self._rollback_quietly()
                key = ", ".join(f"{k}={r[self._cols.index(k)]!r}" for k in self.key_columns)
                diag = getattr(row_exc, "diag", None)
                column = getattr(diag, "column_name", None) if diag else None
                param = re.search(r"parameter \$(\d+)", str(row_exc))
                if column is None and param and int(param.group(1)) <= len(self._cols):
                    column = self._cols[int(param.group(1)) - 1]
                where = f" at column {column}" if column else ""
                return (f"row with key {key} rejected{where}: "
                        f"{str(row_exc).strip()} [SQLSTATE {row_exc.sqlstate}]")
            finally:
                self._rollback_quietly()
        return f"flush of {len(rows)} rows failed: {str(exc).strip()} [SQLSTATE {exc.sqlstate}]"


def _sort_key(key: tuple):
    return tuple((v is None, str(type(v)), v) for v in key)
