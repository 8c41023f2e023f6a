"""Type-faithful, idempotent foreach writer for the ``ledger`` table.

Usage (PySpark, micro-batch or real-time mode)::

    from solution import LedgerWriter
    (df.writeStream
       .foreach(LedgerWriter("postgresql://user:pw@host:5432/db", "ledger"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/ledger")
       .trigger(realTime="5 minutes")        # or processingTime=... for micro-batch
       .start())

Why values come back exactly as Spark sent them
-----------------------------------------------
* No value is ever turned into a float or a string on the Python side.
  ``DecimalType(38,18)`` arrives as ``decimal.Decimal`` and is sent as the exact
  decimal text (psycopg's Decimal dumper), never via ``float``: that was the
  "last digits" bug. ``DoubleType`` is sent with Python's shortest round-trip
  ``repr`` so ``double precision`` stores the identical IEEE value.
* ``TimestampType`` arrives as a naive ``datetime`` carrying microseconds; it is
  bound as a ``timestamp`` parameter (ISO text with all 6 fractional digits), not
  formatted with ``strftime``/``%S`` or converted to epoch seconds as a float
  (the "microseconds" bug). The column is ``timestamp(6)`` so nothing is rounded.
  It is stored as the wall-clock time PySpark handed the worker (the executor's
  local zone, as PySpark converts TimestampType for Python); no Postgres
  ``TimeZone`` setting is involved because the parameter has no zone. If a value
  ever arrives zone-aware it is converted to that same local wall clock first.
* Every parameter is cast to the column's own type *without* its modifier
  (``numeric``, ``timestamp without time zone``, ``uuid``, ``jsonb``, ``text[]``
  ... read from the catalog), so the text of a UUID / JSON document is parsed by
  Postgres exactly as a plain INSERT would, and no cast narrows a value
  (``::numeric(10,2)`` would round silently; the assignment to the column applies
  the real precision and raises instead of cutting).
* ``BinaryType`` arrives as ``bytearray`` and is sent as ``bytes`` (bytea),
  ``ArrayType(StringType)`` as a Python list (``text[]``, NULL elements and
  empty arrays kept), booleans and longs as themselves.
* ``None`` is sent as SQL NULL in every column, and the upsert's ``DO UPDATE``
  sets *every* non-key column from ``EXCLUDED``, so a later NULL overwrites an
  earlier value (nulls round-trip too).

Delivery is at-least-once (a failed epoch / long batch is replayed), so the write
is an upsert on ``id``: replays leave the table as one clean run would.
Under real-time mode ``open()``/``close()`` run once per long batch, so rows are
flushed from ``process()`` (size) and from a dwell timer thread, not only in
``close()``. ``open()`` never returns False (that would silently drop rows).
Requires psycopg 3 (``pip install "psycopg[binary]>=3.1"``) on the executors.
"""
from __future__ import annotations

import datetime as _dt
import threading
import time
from decimal import Decimal
from typing import Any

__all__ = ["LedgerWriter", "LedgerForeachWriter"]

# The columns the ledger table has (the Spark row's field names).
LEDGER_COLUMNS = ("id", "amount", "at", "day", "ref", "doc", "blob", "tags", "note", "flag", "n", "ratio")
KEY_COLUMNS = ("id",)

# Column types as the ledger's DDL declares them, without modifiers; used only if
# the catalog lookup finds nothing (it is normally read from pg_attribute).
_DEFAULT_CASTS = {
    "id": "text", "amount": "numeric", "at": "timestamp without time zone", "day": "date",
    "ref": "uuid", "doc": "jsonb", "blob": "bytea", "tags": "text[]", "note": "text",
    "flag": "boolean", "n": "bigint", "ratio": "double precision",
}

# Base type of each column (domains resolved), written without the type modifier.
_COLUMNS_SQL = """
SELECT a.attname,
       format_type(COALESCE(NULLIF(t.typbasetype, 0), a.atttypid), -1) AS cast_type
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


class SinkError(RuntimeError):
    """A row or a flush the sink could not write (the message names the key)."""


def _split_table(table: str) -> tuple[str | None, str]:
    """'schema.table' or 'table' → (schema, table); names used exactly as given."""
    if "." in table and not table.startswith('"'):
        schema, _, name = table.partition(".")
        return schema, name
    return None, table.strip('"')


class LedgerForeachWriter:
    """Picklable PySpark ``foreach`` writer: exact-type upsert on ``id``."""

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_ms: int = 250):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty table name")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_ms = backoff_ms
        self._reset()

    # -- pickling: only configuration travels to the executors ------------------
    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in
                ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_ms")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # never show the DSN (it may hold a password)
        return f"LedgerForeachWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn = None
        self._statement = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False

    # -- connection and statement --------------------------------------------------
    def _connect(self):
        import psycopg

        conn = psycopg.connect(self.dsn, autocommit=False, application_name="ledger-foreach-sink")
        return conn

    def _build_statement(self, conn):
        from psycopg import sql

        schema, name = _split_table(self.table)
        target = sql.Identifier(schema, name) if schema else sql.Identifier(name)
        qualified = target.as_string(conn)
        casts = dict(_DEFAULT_CASTS)
        with conn.cursor() as cur:
            cur.execute(_COLUMNS_SQL, (qualified,))
            found = {attname: cast for attname, cast in cur.fetchall()}
        conn.rollback()
        if found:
            missing = [c for c in LEDGER_COLUMNS if c not in found]
            if missing:
                raise SinkError(f"table {self.table} has no column(s) {', '.join(missing)}")
            casts.update({c: found[c] for c in LEDGER_COLUMNS})
        values = sql.SQL(", ").join(
            sql.SQL("%s::{}").format(sql.SQL(casts[c])) for c in LEDGER_COLUMNS)
        updates = sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
            for c in LEDGER_COLUMNS if c not in KEY_COLUMNS)
        return sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({keys}) DO UPDATE SET {upd}").format(
            t=target,
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in LEDGER_COLUMNS),
            vals=values,
            keys=sql.SQL(", ").join(sql.Identifier(k) for k in KEY_COLUMNS),
            upd=updates)

    # -- values: keep every value in its exact Python type -----------------------------
    @staticmethod
    def _value(column: str, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, float) and column == "amount":
            # Never expected from DecimalType; if it happens keep the shortest exact repr.
            return Decimal(repr(value))
        if isinstance(value, _dt.datetime) and value.tzinfo is not None:
            # PySpark hands TimestampType over as a naive local datetime; keep that convention.
            return value.astimezone().replace(tzinfo=None)
        if isinstance(value, tuple):
            return list(value)
        return value

    def _row_values(self, row: Any) -> tuple:
        if hasattr(row, "asDict"):
            data = row.asDict(recursive=False)
        elif isinstance(row, dict):
            data = row
        else:
            data = dict(zip(LEDGER_COLUMNS, row))
        missing = [c for c in LEDGER_COLUMNS if c not in data]
        if missing:
            raise SinkError(f"row lacks field(s) {', '.join(missing)}; it has {sorted(data)}")
        values = tuple(self._value(c, data[c]) for c in LEDGER_COLUMNS)
        if values[0] is None:
            raise SinkError("row with a null id cannot be upserted (id is the primary key)")
        return values

    # -- flushing ----------------------------------------------------------------------
    def _flush_locked(self) -> None:
        """Write the buffer in one transaction (retrying lost connections); caller holds the lock."""
        if not self._buffer:
            return
        import psycopg

        rows = [self._buffer[k] for k in sorted(self._buffer)]  # key order: fewer lock waits between tasks
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                break
            except (psycopg.OperationalError, psycopg.errors.SerializationFailure,
                    psycopg.errors.DeadlockDetected) as exc:
                self._discard_connection()
                attempt += 1
                if attempt > self.max_retries:
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed after "
                                    f"{attempt} attempts: {type(exc).__name__}: {exc}") from None
                time.sleep(min(5.0, self.backoff_ms / 1000.0 * 2 ** (attempt - 1)))
            except psycopg.Error as exc:
                self._discard_connection()
                keys = ", ".join(repr(r[0]) for r in rows[:5])
                raise SinkError(f"Postgres refused a flush of {len(rows)} rows into {self.table} "
                                f"(keys {keys}{'...' if len(rows) > 5 else ''}): "
                                f"{type(exc).__name__}: {exc}") from None
        self._buffer.clear()
        self._oldest = None

    def _discard_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _timer_loop(self) -> None:
        interval = max(self.max_dwell_ms, 10) / 1000.0 / 2
        while not self._stop.wait(interval):
            with self._lock:
                if self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # kept and raised by the next process()/close()
                        self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- the foreach contract -----------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset()
        conn = self._connect()
        try:
            self._statement = self._build_statement(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, name="ledger-sink-timer", daemon=True)
            self._timer.start()
        return True  # never False: Spark would skip the partition's rows silently

    def process(self, row: Any) -> None:
        if not self._open:
            raise SinkError("process() called on a writer that is not open")
        values = self._row_values(row)
        with self._lock:
            self._raise_stored()
            self._buffer[values[0]] = values  # one row per key: the last one wins, as sequential upserts
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                else:
                    self._buffer.clear()  # Spark replays the epoch; the upsert makes that harmless
        finally:
            self._discard_connection()


def LedgerWriter(dsn: str, table: str) -> LedgerForeachWriter:
    """The foreach writer for ``df.writeStream.foreach(...)``: exact types, upsert on ``id``."""
    return LedgerForeachWriter(dsn, table)
