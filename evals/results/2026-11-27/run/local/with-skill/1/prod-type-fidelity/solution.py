"""A lossless, idempotent Postgres ``foreach`` writer for the ``ledger`` table.

``LedgerWriter(dsn, table)`` is a PySpark ``foreach`` writer (``open`` / ``process``
/ ``close``) for a real-time (``trigger(realTime="5 minutes")``, ``outputMode("update")``)
or micro-batch query::

    query = (ledger_df.writeStream
             .foreach(LedgerWriter(dsn, "ledger"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")      # the checkpoint interval, not a latency
             .start())

Why values come back exactly as Spark sent them (what the old sink lost):

* ``amount numeric(38,18)`` -- PySpark hands ``DecimalType`` over as ``decimal.Decimal``;
  it is sent as a ``Decimal`` (numeric, every digit) and a ``float`` is *refused*, never
  converted: a float has ~17 significant digits, which is how the last digits went wrong.
* ``at timestamp(6)`` -- PySpark hands ``TimestampType`` over as a naive ``datetime`` with
  all six microsecond digits (it converts from Spark's integer microseconds, no float); it
  is sent as a ``datetime`` cast to ``timestamp`` (no time-zone conversion on the way, no
  ``str()``/``strftime``/``.timestamp()`` float that rounds microseconds). An aware datetime
  is refused, because Postgres would shift it by its session ``TimeZone`` on the cast.
  Note: a ``timestamp`` column holds a wall clock, and PySpark builds the naive value in
  the Python worker's local zone (the same value ``df.collect()`` shows on a driver in the
  same zone). If the executors' zone may differ from the zone you mean, cast the column to
  ``TIMESTAMP_NTZ`` in Spark before the sink (``col("at").cast("timestamp_ntz")``) -- the
  writer then stores that wall clock unchanged.
* ``day date`` -- a ``date`` (a ``datetime`` is refused: it is not a date).
* ``ref uuid`` -- the text is cast by Postgres (``::uuid``); Postgres prints a uuid in
  lower-case canonical form, so compare as UUIDs (upper-case or brace forms read back
  canonical -- the only normalisation a uuid column can do).
* ``doc jsonb`` -- the JSON *text* is sent untouched and cast by Postgres (``::jsonb``):
  it is never ``json.loads``-ed in Python, which would turn ``0.100000000000000000001`` into
  a float. jsonb keeps numbers as exact numerics; like any jsonb it normalises whitespace
  and key order (use a ``json`` column if the exact text must survive).
* ``blob bytea`` -- the same bytes (``bytearray`` / ``bytes``), binary.
* ``tags text[]`` -- a list, empty lists and ``NULL`` elements included.
* ``note text`` -- as sent; text with a NUL character (which Postgres text cannot hold) is
  refused naming the row, never silently cut.
* ``flag boolean``, ``n bigint``, ``ratio double precision`` -- a ``bool``, an ``int`` (a
  ``bool`` or ``float`` is refused), a ``float`` (shortest round-trip repr, so every bit
  survives; NaN, +/-Infinity and -0.0 too).
* ``None`` is ``NULL`` in every column but ``id`` (the primary key).

Delivery into a ``foreach`` sink is at-least-once (a replayed epoch sends rows again), so
each flush is one transaction of ``INSERT ... ON CONFLICT (id) DO UPDATE``: a replay rewrites
the same values. Rows are buffered one per id (the last one wins), and flushed when
``max_batch_rows`` ids are buffered or the oldest buffered row is ``max_dwell_ms`` old -- from
``process()`` and from a timer thread, because under real-time mode ``close()`` only comes at
the end of a long batch. A bad value raises ``LedgerBadRow`` naming the id and the column,
and nothing of its flush is written. ``open()`` never returns ``False`` (Spark would drop the
partition's rows silently); it raises instead.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import threading
import time
import uuid
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

#: The ledger's columns, in order, with the cast each parameter gets. The cast is the
#: column's type *without* modifiers: the assignment into numeric(38,18) / timestamp(6)
#: then applies precision and scale exactly as a plain INSERT does.
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


class LedgerSinkError(RuntimeError):
    """The sink could not write (connection lost past the retry budget, or a server error)."""


class LedgerBadRow(LedgerSinkError):
    """A row holds a value its column cannot take without changing it."""

    def __init__(self, message: str, key: Any = None, column: str | None = None):
        super().__init__(message)
        self.key, self.column = key, column

    def __reduce__(self):  # picklable, so Spark can report it from the worker
        return (type(self), (str(self), self.key, self.column))


# -- value checks: the Python type each column takes without a silent change --------------
def _is(kind: type | tuple[type, ...], refused: tuple[type, ...] = ()):
    return lambda v: isinstance(v, kind) and not isinstance(v, refused)


def _text_ok(v: Any) -> bool:
    return isinstance(v, str) and "\x00" not in v


def _tags_ok(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(e is None or _text_ok(e) for e in v)


_CHECKS = {
    "id": (_text_ok, "a str without NUL"),
    "amount": (_is((Decimal, int), (bool,)), "a decimal.Decimal (a float would lose digits)"),
    "at": (lambda v: isinstance(v, dt.datetime) and v.tzinfo is None,
           "a naive datetime (cast to timestamp_ntz in Spark to choose the wall clock)"),
    "day": (_is(dt.date, (dt.datetime,)), "a date"),
    "ref": (lambda v: isinstance(v, uuid.UUID) or _text_ok(v), "a UUID string"),
    "doc": (_text_ok, "JSON text (a str)"),
    "blob": (_is((bytes, bytearray, memoryview)), "bytes"),
    "tags": (_tags_ok, "a list of str (None elements allowed)"),
    "note": (_text_ok, "a str without NUL (Postgres text cannot hold \\x00)"),
    "flag": (_is(bool), "a bool"),
    "n": (_is(int, (bool,)), "an int"),
    "ratio": (_is((float, int), (bool,)), "a float"),
}


def _field(row: Any, name: str) -> Any:
    """A row's value by field name (a Spark Row, a mapping), never by position."""
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        if hasattr(row, "asDict"):
            d = row.asDict()
            if name in d:
                return d[name]
        raise LedgerBadRow(f"row has no field {name!r} (fields: {list(getattr(row, '__fields__', []) or row)})",
                           key=None, column=name) from None


def _split_table(table: str) -> sql.Identifier:
    """'ledger' or 'schema.ledger' (unquoted, as SQL folds it) or '"Schema"."Ledger"' (exact)."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty name, got {table!r}")
    parts, buf, quoted, i = [], "", False, 0
    while i < len(table):
        c = table[i]
        if quoted:
            if c == '"' and table[i + 1:i + 2] == '"':
                buf += '"'
                i += 1
            elif c == '"':
                quoted = False
            else:
                buf += c
        elif c == '"':
            quoted = True
            parts.append(None)  # marker: this part was quoted
        elif c == ".":
            parts.append(buf)
            buf = ""
        else:
            buf += c.lower()
        i += 1
    parts.append(buf)
    names = [p for p in parts if p is not None]
    if quoted or len(names) > 2 or any(not n for n in names):
        raise ValueError(f"cannot read table name {table!r}: use 'table', 'schema.table' or '\"Schema\".\"Table\"'")
    return sql.Identifier(*names)


class LedgerWriter:
    """``foreach`` writer: exact-type upserts on ``id`` into the ledger table."""

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000):
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._target = _split_table(table)  # fail on the driver, before the query starts
        self._reset()

    # -- only the configuration travels to the executors ----------------------------------
    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms")

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._target = _split_table(self.table)
        self._reset()

    def __repr__(self) -> str:  # never print the DSN (it may hold a password)
        return f"LedgerWriter(table={self.table!r}, max_batch_rows={self.max_batch_rows})"

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._statement = self._upsert_statement()

    def _upsert_statement(self) -> sql.Composed:
        cols = [c for c, _ in COLUMNS]
        values = sql.SQL(", ").join(sql.SQL("%s::" + cast) for _, cast in COLUMNS)  # casts are constants
        updates = sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                     for c in cols if c != KEY)
        return sql.SQL("INSERT INTO {t} ({cols}) VALUES ({values}) ON CONFLICT ({key}) DO UPDATE SET {updates}").format(
            t=self._target, cols=sql.SQL(", ").join(map(sql.Identifier, cols)), values=values,
            key=sql.Identifier(KEY), updates=updates)

    # -- the foreach contract ---------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect()
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._tick, daemon=True,
                                           name=f"ledger-flusher-p{partition_id}")
            self._timer.start()
        return True  # raise on failure, never return False

    def process(self, row: Any) -> None:
        values = self._values(row)
        with self._lock:
            if self._error is not None:
                raise self._error
            self._buffer.pop(values[0], None)  # one row per id; the later row wins
            self._buffer[values[0]] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        try:
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()
                else:  # the task failed: Spark replays these rows, drop them
                    self._buffer.clear()
        finally:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    # -- rows to values ---------------------------------------------------------------------
    def _values(self, row: Any) -> tuple:
        values = tuple(_field(row, name) for name, _ in COLUMNS)
        key = values[0]
        if key is None:
            raise LedgerBadRow("row rejected: id (the primary key) is null", key=None, column="id")
        for (name, _), value in zip(COLUMNS, values):
            if value is None:
                continue
            ok, expected = _CHECKS[name]
            if not ok(value):
                raise LedgerBadRow(f"row with id={key!r} rejected at column {name}: {type(value).__name__} "
                                   f"value {ascii(value)[:80]} where the column takes {expected}; "
                                   "nothing was converted", key=key, column=name)
        return values

    # -- flushing ---------------------------------------------------------------------------
    def _tick(self) -> None:
        """Flush the buffer once its oldest row is max_dwell_ms old, even when no row follows."""
        period = max(self.max_dwell_ms / 4000, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None:
                    return
                if self._oldest is not None and (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # kept, raised by the next process()/close()
                        log.error("ledger sink: flush failed: %s", exc)
                        return

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        batch = [self._buffer[k] for k in sorted(self._buffer)]  # key order: no deadlocks between tasks
        try:
            self._write(batch)
        except BaseException as exc:
            self._error = exc
            raise
        self._buffer.clear()
        self._oldest = None

    def _write(self, batch: list[tuple]) -> None:
        """One transaction per flush; lost connections and lock conflicts are retried."""
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.transaction():
                    with self._conn.cursor() as cur:
                        cur.executemany(self._statement, batch)
                return
            except (psycopg.errors.DataError, psycopg.errors.IntegrityError, psycopg.errors.SyntaxErrorOrAccessRuleViolation,
                    psycopg.errors.FeatureNotSupported) as exc:
                raise self._bad_row(batch, exc) from exc
            except (psycopg.OperationalError, psycopg.InterfaceError,
                    psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                if attempt >= self.max_retries:
                    raise LedgerSinkError(f"ledger sink: flush of {len(batch)} rows into {self.table} failed "
                                          f"after {attempt + 1} attempts: {type(exc).__name__}: {exc}") from exc
                log.warning("ledger sink: %s; retrying in %.2fs", type(exc).__name__, delay)
                if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and self._conn is not None:
                    try:
                        self._conn.close()
                    except Exception:
                        pass
                    self._conn = None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)

    def _bad_row(self, batch: list[tuple], exc: BaseException) -> LedgerSinkError:
        """Find the row Postgres refused (the flush was rolled back: nothing of it is written)."""
        try:
            with self._conn.transaction(force_rollback=True):
                with self._conn.cursor() as cur:
                    for values in batch:
                        try:
                            with self._conn.transaction():
                                cur.execute(self._statement, values)
                        except psycopg.Error as one:
                            diag = getattr(one, "diag", None)
                            column = getattr(diag, "column_name", None) if diag else None
                            return LedgerBadRow(f"row with id={values[0]!r} rejected by Postgres "
                                                f"({getattr(one, 'sqlstate', None)}): {one}; nothing of its "
                                                f"flush of {len(batch)} rows was written",
                                                key=values[0], column=column)
        except psycopg.Error:
            pass
        return LedgerSinkError(f"ledger sink: flush into {self.table} refused: {exc}")

    def _connect(self) -> psycopg.Connection:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10,
                                       application_name="ledger-foreach-sink")
                return conn
            except psycopg.OperationalError as exc:
                if attempt >= self.max_retries:
                    raise LedgerSinkError(f"ledger sink: cannot connect after {attempt + 1} attempts: "
                                          f"{type(exc).__name__}") from None  # no DSN/password in the message
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
        raise AssertionError("unreachable")


__all__ = ["LedgerWriter", "LedgerBadRow", "LedgerSinkError", "COLUMNS"]
