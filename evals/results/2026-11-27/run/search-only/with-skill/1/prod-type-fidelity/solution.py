"""Type-exact, idempotent foreach writer for the ``ledger`` table (PySpark real-time mode -> Postgres).

Usage::

    from solution import LedgerWriter

    query = (df.writeStream
             .foreach(LedgerWriter("host=... dbname=... user=... password=...", "ledger"))
             .outputMode("update")                      # real-time mode accepts only "update"
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")             # checkpoint interval, not a latency target
             .start())

Why every value reads back exactly as Spark sent it
---------------------------------------------------
The usual culprits of "amounts off in the last digits" and "timestamps off by
microseconds" are a sink that goes through ``float`` (Decimal -> float loses
digits past ~15-17 significant digits), through ``str()``/``strftime`` of a
datetime (``%S`` drops microseconds, ``isoformat`` drops them when they are 0,
custom formats truncate to milliseconds), or through SQL text built by hand.
This writer never converts a value to another Python type and never formats
one: each value is sent as a query parameter by psycopg 3, which dumps

* ``Decimal`` as ``numeric`` text with every digit (a DecimalType(38,18) fits
  numeric(38,18) exactly, so no rounding happens on assignment),
* a naive ``datetime`` as ``timestamp`` with all six fractional digits,
* ``date`` as ``date``, ``bool``/``int`` as themselves,
* ``float`` exactly (shortest round-trip repr / IEEE binary; NaN and +-Infinity
  included, double precision stores them),
* ``bytes`` as ``bytea`` (PySpark hands BinaryType over as ``bytearray``; it
  is passed as ``bytes``),
* ``list`` of ``str`` (``None`` elements included, empty lists included) as
  ``text[]``,
* ``str`` for ``uuid`` and ``jsonb`` as text that Postgres parses, as a plain
  INSERT would;

and ``None`` as SQL NULL in every column. Each placeholder carries an explicit
cast to the column's *unconstrained* base type (``numeric``, not
``numeric(38,18)``; ``timestamp``, not ``timestamp(6)``), so no cast narrows a
value: the assignment into the column applies precision exactly as a plain
INSERT does.

Timestamps: the column is ``timestamp`` (without time zone) and the Spark
column is ``TimestampType`` (an instant). PySpark hands a TimestampType value
to the Python worker as a *naive* ``datetime`` in the worker's local time zone,
and ``collect()`` on the driver produces the same naive local ``datetime``.
The writer stores that wall-clock value unchanged (it is never re-interpreted
through the Postgres session's ``TimeZone``), so ``SELECT at`` reads back the
exact ``datetime`` Spark produced, microseconds included. If the executors'
time zone may differ from the zone you want stored, cast upstream:
``df.withColumn("at", F.col("at").cast("timestamp_ntz"))`` pins the wall clock
to ``spark.sql.session.timeZone`` (the writer handles both the same way).

``jsonb`` note: jsonb stores *parsed* JSON, so the value read back is the same
JSON document (same keys, values and number digits - jsonb keeps numbers as
numeric), but whitespace, key order and duplicate keys are normalised by
Postgres. Byte-for-byte text preservation would need a ``json`` or ``text``
column; the table's type was kept as given.

Delivery and idempotency
------------------------
Delivery to a ``foreach`` sink is at-least-once (a failed long batch is
replayed), so every flush is ``INSERT ... ON CONFLICT (id) DO UPDATE``: a
replayed row rewrites the same values. Rows whose values are identical to the
stored ones are skipped (``IS DISTINCT FROM`` on the stored text form) so
replays produce no dead tuples.

Real-time mode calls ``open()``/``close()`` once per long batch, so the writer
flushes from ``process()`` (every ``max_batch_rows`` distinct ids) and from a
timer thread (when the oldest buffered row is ``max_dwell_ms`` old), not only
from ``close()``. ``open()`` never returns ``False`` (Spark would silently
drop the partition); it raises instead.
"""

from __future__ import annotations

import datetime as _dt
import logging
import random
import threading
import time
from decimal import Decimal
from typing import Any

log = logging.getLogger("ledger_writer")

#: (column, cast) in table order. The cast is the column's type without its
#: modifier, so it never narrows a value (numeric(38,18) -> numeric, timestamp(6) -> timestamp).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"),
    ("amount", "numeric"),
    ("at", "timestamp"),
    ("day", "date"),
    ("ref", "uuid"),
    ("doc", "jsonb"),
    ("blob", "bytea"),
    ("tags", "text[]"),
    ("note", "text"),
    ("flag", "boolean"),
    ("n", "bigint"),
    ("ratio", "double precision"),
)
KEY = "id"
_NAMES = tuple(c for c, _ in COLUMNS)


class LedgerBadRowError(ValueError):
    """A row Postgres (or the writer) refuses; names the row's id and the reason. Retrying cannot fix it."""


def _table_identifier(table: str):
    """``ledger``, ``schema.ledger`` or ``"Quoted"."Name"`` -> a quoted psycopg identifier."""
    from psycopg import sql

    parts: list[str] = []
    rest = table.strip()
    while rest:
        if rest.startswith('"'):
            end = 1
            name = []
            while True:
                nxt = rest.find('"', end)
                if nxt < 0:
                    raise ValueError(f"unterminated quoted identifier in table name {table!r}")
                name.append(rest[end:nxt])
                if rest[nxt + 1:nxt + 2] == '"':  # doubled quote inside a quoted name
                    name.append('"')
                    end = nxt + 2
                    continue
                rest = rest[nxt + 1:]
                break
            parts.append("".join(name))
        else:
            dot = rest.find(".")
            word = rest if dot < 0 else rest[:dot]
            parts.append(word.strip().lower())  # unquoted names fold to lower case, as SQL does
            rest = "" if dot < 0 else rest[dot:]
        rest = rest.strip()
        if rest.startswith("."):
            rest = rest[1:].strip()
            if not rest:
                raise ValueError(f"empty name part in table name {table!r}")
        elif rest:
            raise ValueError(f"cannot read table name {table!r}")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _upsert_sql(table: str):
    from psycopg import sql

    target = _table_identifier(table)
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in _NAMES)
    values = sql.SQL(", ").join(sql.SQL("%s::" + cast) for _, cast in COLUMNS)  # casts are constants
    updates = [c for c in _NAMES if c != KEY]
    set_list = sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)
    # Compare as text: jsonb/numeric/float "=" holds for some values stored differently
    # (1.0 vs 1.00), and a skipped real change would break "reads back as sent".
    old = sql.SQL(", ").join(sql.SQL("t.{c}::text").format(c=sql.Identifier(c)) for c in updates)
    new = sql.SQL(", ").join(sql.SQL("EXCLUDED.{c}::text").format(c=sql.Identifier(c)) for c in updates)
    return sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({k}) DO UPDATE SET {sets} "
                   "WHERE ({old}) IS DISTINCT FROM ({new})").format(
        t=target, cols=cols, vals=values, k=sql.Identifier(KEY), sets=set_list, old=old, new=new)


def _as_dict(row: Any) -> dict:
    if hasattr(row, "asDict"):
        return row.asDict(recursive=False)
    if isinstance(row, dict):
        return row
    if isinstance(row, (tuple, list)) and len(row) == len(_NAMES):
        return dict(zip(_NAMES, row))
    raise LedgerBadRowError(f"cannot read row of type {type(row).__name__}")


def _check_text(key: Any, column: str, value: str) -> None:
    if "\x00" in value:
        raise LedgerBadRowError(f"row id={key!r}: column {column!r} holds a NUL character, "
                                "which Postgres text cannot store")


def _convert(row: Any) -> tuple:
    """Spark row -> parameter tuple in column order. Values are passed through unchanged except
    ``bytearray``/``memoryview`` -> ``bytes`` and ``tuple`` -> ``list``; nothing is rounded or formatted."""
    d = _as_dict(row)
    missing = [c for c in _NAMES if c not in d]
    key = d.get(KEY)
    if missing:
        raise LedgerBadRowError(f"row id={key!r}: missing column(s) {missing}")
    if key is None:
        raise LedgerBadRowError("row with a null id: the upsert key cannot be null")
    out = []
    for name, cast in COLUMNS:
        v = d[name]
        if v is None:
            out.append(None)
            continue
        if cast == "numeric":
            if isinstance(v, float):  # never expected from DecimalType; keep every digit of the double
                v = Decimal(repr(v))
            elif not isinstance(v, (Decimal, int)):
                raise LedgerBadRowError(f"row id={key!r}: column 'amount' expects a Decimal, got {type(v).__name__}")
        elif cast == "timestamp":
            if not isinstance(v, _dt.datetime):
                raise LedgerBadRowError(f"row id={key!r}: column 'at' expects a datetime, got {type(v).__name__}")
            if v.tzinfo is not None:
                # PySpark gives naive local datetimes; an aware one is turned into the same local wall clock
                v = v.astimezone().replace(tzinfo=None)
        elif cast == "date":
            if isinstance(v, _dt.datetime) or not isinstance(v, _dt.date):
                raise LedgerBadRowError(f"row id={key!r}: column 'day' expects a date, got {type(v).__name__}")
        elif cast == "bytea":
            if isinstance(v, (bytearray, memoryview)):
                v = bytes(v)
            elif not isinstance(v, bytes):
                raise LedgerBadRowError(f"row id={key!r}: column 'blob' expects bytes, got {type(v).__name__}")
        elif cast == "text[]":
            if isinstance(v, tuple):
                v = list(v)
            if not isinstance(v, list):
                raise LedgerBadRowError(f"row id={key!r}: column 'tags' expects a list, got {type(v).__name__}")
            for e in v:
                if e is not None:
                    if not isinstance(e, str):
                        raise LedgerBadRowError(f"row id={key!r}: column 'tags' holds a non-string element")
                    _check_text(key, name, e)
        elif cast == "boolean":
            if not isinstance(v, bool):
                raise LedgerBadRowError(f"row id={key!r}: column 'flag' expects a bool, got {type(v).__name__}")
        elif cast == "bigint":
            if isinstance(v, bool) or not isinstance(v, int):
                raise LedgerBadRowError(f"row id={key!r}: column 'n' expects an int, got {type(v).__name__}")
        elif cast == "double precision":
            if isinstance(v, bool) or not isinstance(v, (float, int)):
                raise LedgerBadRowError(f"row id={key!r}: column 'ratio' expects a float, got {type(v).__name__}")
            v = float(v)
        else:  # text, uuid, jsonb: the Spark value is a str, parsed by Postgres as an INSERT parses it
            if not isinstance(v, str):
                raise LedgerBadRowError(f"row id={key!r}: column {name!r} expects a str, got {type(v).__name__}")
            _check_text(key, name, v)
        out.append(v)
    return tuple(out)


class LedgerWriter:
    """PySpark ``foreach`` writer: exact-type upsert on ``id`` into ``table``.

    ``LedgerWriter(dsn, table)`` is itself the writer object passed to ``writeStream.foreach``.
    Only plain settings are pickled to the executors; the connection, buffer and flusher thread
    are made in ``open()``.
    """

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        _table_identifier(table)  # refuse a bad table name on the driver, before Spark starts
        if max_batch_rows < 1 or max_dwell_ms < 1:
            raise ValueError("max_batch_rows and max_dwell_ms must be >= 1")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._reset()

    # -- pickling: never ship live state ---------------------------------------------------
    def _reset(self) -> None:
        self._conn = None
        self._sql = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._error: BaseException | None = None
        self._opened = False

    def __getstate__(self) -> dict:
        keep = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                "backoff_initial_ms", "backoff_max_ms")
        return {k: self.__dict__[k] for k in keep}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- foreach contract -------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("LedgerWriter.open() called twice without close()")
        self._sql = _upsert_sql(self.table)
        self._connect_with_retries()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._buffer = {}
        self._oldest = None
        self._error = None
        self._opened = True
        self._thread = threading.Thread(target=self._timer, name=f"ledger-flusher-{partition_id}", daemon=True)
        self._thread.start()
        return True  # never False: Spark would skip this partition's rows without an error

    def process(self, row: Any) -> None:
        if not self._opened:
            raise RuntimeError("LedgerWriter.process() called before open() or after close()")
        self._raise_stored()
        values = _convert(row)
        with self._lock:
            self._raise_stored()
            self._buffer[values[0]] = values  # one row per id per flush: the last one wins
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._opened = False
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        try:
            if error is None and self._error is None:
                with self._lock:
                    self._flush_locked()
            self._raise_stored()
        finally:
            self._buffer = {}
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    # -- internals --------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            try:
                with self._lock:
                    if self._error is None and self._oldest is not None and \
                            (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                        self._flush_locked()
            except BaseException as exc:  # stored, raised by the next process() or close()
                log.error("ledger flush failed: %s", exc)
                self._error = exc
                return

    def _connect(self) -> None:
        import psycopg

        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="ledger-foreach-sink")

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * (0.5 + random.random() / 2))

    def _connect_with_retries(self) -> None:
        import psycopg

        for attempt in range(self.max_retries + 1):
            try:
                self._connect()
                return
            except psycopg.OperationalError:
                if attempt == self.max_retries:
                    raise
                self._sleep(attempt)

    def _flush_locked(self) -> None:
        """Write the buffer in one transaction (caller holds the lock). Retries lost connections and
        lock conflicts; a value Postgres refuses raises LedgerBadRowError naming the row's id."""
        import psycopg
        from psycopg import errors as pgerr

        if not self._buffer:
            self._oldest = None
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]  # sorted keys: no deadlocks between tasks
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.executemany(self._sql, rows)
                self._conn.commit()
                break
            except (pgerr.DataException, pgerr.IntegrityConstraintViolation) as exc:
                self._safe_rollback()
                raise self._diagnose(rows, exc) from exc
            except (psycopg.OperationalError, pgerr.SerializationFailure, pgerr.DeadlockDetected,
                    pgerr.LockNotAvailable) as exc:
                self._safe_rollback()
                if attempt == self.max_retries:
                    raise
                log.warning("ledger flush retry %d after %s", attempt + 1, type(exc).__name__)
                self._sleep(attempt)  # a closed connection is reopened at the top of the loop
        self._buffer = {}
        self._oldest = None

    def _safe_rollback(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            pass

    def _diagnose(self, rows: list[tuple], exc: BaseException) -> BaseException:
        """Find the row Postgres refuses (one savepoint per row, all rolled back) and name its id."""
        try:
            with self._conn.cursor() as cur:
                for values in rows:  # each row alone in its own transaction, always rolled back
                    try:
                        cur.execute(self._sql, values)
                    except Exception as row_exc:
                        self._safe_rollback()
                        return LedgerBadRowError(f"row id={values[0]!r} refused by Postgres: "
                                                 f"{str(row_exc).strip().splitlines()[0]}")
                    self._safe_rollback()
        except Exception:
            self._safe_rollback()
        return LedgerBadRowError(f"flush of {len(rows)} rows refused by Postgres: {str(exc).strip()}")
