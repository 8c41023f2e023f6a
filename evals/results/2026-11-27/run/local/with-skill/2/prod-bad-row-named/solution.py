"""Foreach writer for ``readings`` that fails loudly and names the row that broke it.

    from solution import ReadingsWriter
    (df.writeStream
       .foreach(ReadingsWriter("host=... dbname=... user=...", "readings"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/readings")
       .trigger(realTime="5 minutes")        # the checkpoint interval, not a latency
       .start())

Table: ``readings (id text primary key, sensor text not null,
score double precision check (score <> 'NaN'), note text)``.

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``): Spark's foreach
  delivery is at-least-once, so a replayed epoch / long batch is harmless.
* A bad row is never dropped, truncated or "cleaned": the writer raises
  :class:`BadRowError`, whose message starts with ``readings row id=<repr of the
  full id>`` and gives the column and Postgres' reason (and SQLSTATE).  The Spark
  task, hence the query, fails with that message (``query.exception()``, the
  driver log and the executor's stderr all carry it).  ``open()`` never returns
  ``False``, which would make Spark skip a partition without an error.
* Rows that arrived before the bad row stay written: every earlier flush is its
  own committed transaction, and when a flush is refused the writer writes that
  flush's rows one by one *in arrival order* (each under a savepoint), commits the
  ones before the first refused row, and then raises naming it.  Rows after it are
  not written; Spark replays them (and the bad row, which fails again, by
  design) once the query is restarted from its checkpoint.
* Garbage caught before sending (cheaper, and exact): a null ``id``, a null
  ``sensor``, a NUL (``\\x00``) character in any text column (Postgres text
  cannot hold it; psycopg would refuse it anyway), a NaN score (the table's
  CHECK refuses it), a value of the wrong Python type.  Everything else
  (an id too long for the primary-key index: ``54000 index row size ... exceeds
  maximum``, a constraint added later, ...) is decided by Postgres and named the
  same way.  An id is never shortened: if Postgres accepts it, it is stored
  whole; if not, the error names it.
* Real-time mode: ``open()``/``close()`` run once per long batch, so rows are
  flushed from ``process()`` (``max_batch_rows`` distinct ids) and by a timer
  thread (oldest buffered row ``max_dwell_ms`` old), not only in ``close()``.  A
  timed flush that fails is logged at ERROR at once on logger ``readings_sink``
  (the executor's stderr, where on-call can alert on it) and raised by the next
  ``process()`` or ``close()``.  Under stock ``writeStream.foreach`` in real-time
  mode Spark surfaces a Python worker's exception only when the long batch ends,
  so keep the real-time trigger as short as checkpointing allows if the query must
  fail sooner; the ERROR log line is immediate.
* Transient failures (lost connection, server restart, deadlock, serialization
  failure) are retried with backoff and a reconnect; setup errors (missing table
  or column, no privilege, bad login) fail at once without blaming a row.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("readings_sink")

COLUMNS: tuple[str, ...] = ("id", "sensor", "score", "note")
CASTS: dict[str, str] = {"id": "text", "sensor": "text", "score": "double precision", "note": "text"}
KEY = "id"
_MAX_ROWS_PER_STATEMENT = 1000

# SQLSTATEs that mean "this data cannot go in" (a row's fault), as opposed to setup
# or transient errors: data exception (22), integrity constraint (23), program limit
# (54: index row too big), cardinality (21000), datatype mismatch / cannot coerce.
_BAD_ROW_CLASSES = ("22", "23", "54")
_BAD_ROW_CODES = {"21000", "42804", "42846"}
# Retry on the same / a new connection.
_RETRY_CODES = {"40001", "40P01"}
_RECONNECT_CODES = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}


class SinkError(RuntimeError):
    """The writer could not write, for a reason that is not one row's fault."""


class BadRowError(SinkError, ValueError):
    """One row cannot be written; ``key`` is its id, ``column`` the column when known."""

    def __init__(self, key: Any, column: str | None, reason: str, sqlstate: str | None = None) -> None:
        self.key = key
        self.column = column
        self.sqlstate = sqlstate
        where = f" at column {column}" if column else ""
        size = f" (id length {len(key)})" if isinstance(key, str) and len(key) > 80 else ""
        code = f" [SQLSTATE {sqlstate}]" if sqlstate else ""
        super().__init__(f"readings row id={key!r}{size} rejected{where}: {reason}{code}; "
                         "the row was not written, nothing was dropped or altered, rows before it are committed")


def _qualified(table: str) -> sql.Composable:
    parts = table.split(".")
    if len(parts) > 2 or any(not p for p in parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _as_mapping(row: Any) -> dict[str, Any]:
    if hasattr(row, "asDict"):
        return row.asDict(recursive=False)
    if isinstance(row, dict):
        return row
    raise SinkError(f"unsupported row type {type(row).__name__}")


def _check_row(data: dict[str, Any]) -> tuple:
    """Validate one row; return its values in column order or raise BadRowError naming it."""
    missing = [c for c in COLUMNS if c not in data]
    key = data.get(KEY)
    if missing:
        raise BadRowError(key, missing[0], f"the row has no field(s) {missing}")
    if key is None:
        raise BadRowError(None, KEY, f"null id (sensor={data.get('sensor')!r}, score={data.get('score')!r}, "
                                     f"note={data.get('note')!r}); id is the primary key", "23502")
    for c in ("id", "sensor", "note"):
        v = data[c]
        if v is None:
            continue
        if not isinstance(v, str):
            raise BadRowError(key, c, f"expected a string, got {type(v).__name__} {v!r}")
        if "\x00" in v:
            raise BadRowError(key, c, f"text contains a NUL byte at offset {v.index(chr(0))} "
                                      "(Postgres text cannot store it)", "22021")
    if data["sensor"] is None:
        raise BadRowError(key, "sensor", "null value, but sensor is NOT NULL", "23502")
    score = data["score"]
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise BadRowError(key, "score", f"expected a number, got {type(score).__name__} {score!r}")
        score = float(score)
        if math.isnan(score):
            raise BadRowError(key, "score", "score is NaN (check (score <> 'NaN'))", "23514")
    return (key, data["sensor"], score, data["note"])


def _classify(exc: BaseException) -> str:
    """'bad_row' | 'retry' | 'reconnect' | 'permanent'."""
    state = getattr(exc, "sqlstate", None)
    if state is None:
        if isinstance(exc, psycopg.DataError):        # client-side: a value psycopg cannot send
            return "bad_row"
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return "reconnect"                         # connection lost, no SQLSTATE
        return "permanent"
    if state in _RETRY_CODES:
        return "retry"
    if state.startswith("08") or state in _RECONNECT_CODES:
        return "reconnect"
    if state[:2] in _BAD_ROW_CLASSES or state in _BAD_ROW_CODES:
        return "bad_row"
    return "permanent"


class _ReadingsForeachWriter:
    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 6) -> None:
        if not dsn or not table:
            raise ValueError("dsn and table are required")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        _qualified(table)
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()
        self._buffer: dict[str, tuple] = {}    # arrival order; one entry per id (last row wins)
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._opened = False
        self._partition = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:                # never print the DSN (it may hold a password)
        return f"ReadingsWriter(table={self.table!r})"

    # -- SQL ---------------------------------------------------------------------------------
    def _statement(self, nrows: int) -> sql.Composed:
        row = sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL("%s::" + CASTS[c]) for c in COLUMNS))
        return sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES {rows} ON CONFLICT ({key}) DO UPDATE SET {upd}").format(
            t=_qualified(self.table), cols=sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS),
            rows=sql.SQL(", ").join([row] * nrows), key=sql.Identifier(KEY),
            upd=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                   for c in COLUMNS if c != KEY))

    # -- connection ----------------------------------------------------------------------------
    def _connect(self) -> None:
        attempt = 0
        while True:
            try:
                self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="readings-foreach-sink")
                return
            except psycopg.Error as exc:
                attempt += 1
                # a login Postgres refuses (password, missing database) will not work on retry
                text = str(exc).lower()
                if attempt > self.max_retries or any(s in text for s in (
                        "authentication failed", "does not exist", "permission denied", "no pg_hba.conf")):
                    raise SinkError(f"cannot connect to Postgres for table {self.table}: "
                                    f"{type(exc).__name__}: {str(exc).strip()}") from None
                self._sleep(attempt)

    def _sleep(self, attempt: int) -> None:
        time.sleep(min(5.0, 0.25 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))

    def _close_conn(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass
            self._conn = None

    def _rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except Exception:  # noqa: BLE001
                self._close_conn()

    # -- flushing (caller holds the lock) ---------------------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        arrival = list(self._buffer.values())
        ordered = sorted(arrival, key=lambda r: r[0])  # same lock order in every task: no deadlocks
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    for i in range(0, len(ordered), _MAX_ROWS_PER_STATEMENT):
                        chunk = ordered[i:i + _MAX_ROWS_PER_STATEMENT]
                        cur.execute(self._statement(len(chunk)), [v for r in chunk for v in r])
                self._conn.commit()
                break
            except psycopg.Error as exc:
                kind = _classify(exc)
                self._rollback()
                if kind == "bad_row":
                    self._write_until_bad_row(arrival, exc)   # commits the good prefix, then raises
                    break                                     # (not reached unless no single row fails)
                if kind in ("retry", "reconnect") and attempt < self.max_retries:
                    attempt += 1
                    if kind == "reconnect":
                        self._close_conn()
                    self._sleep(attempt)
                    continue
                raise SinkError(f"flush of {len(arrival)} rows to {self.table} failed "
                                f"({'after ' + str(attempt) + ' retries, ' if attempt else ''}"
                                f"{type(exc).__name__} [SQLSTATE {getattr(exc, 'sqlstate', None)}]): "
                                f"{str(exc).strip()}") from None
        self._buffer.clear()
        self._oldest = None

    def _write_until_bad_row(self, rows: list[tuple], batch_exc: psycopg.Error) -> None:
        """Write ``rows`` one by one in arrival order; commit those before the first refused
        row and raise BadRowError naming it. If every row goes in alone, commit them all."""
        bad: tuple | None = None
        bad_exc: psycopg.Error | None = None
        with self._conn.cursor() as cur:
            for r in rows:
                cur.execute("SAVEPOINT readings_row")
                try:
                    cur.execute(self._statement(1), list(r))
                except psycopg.Error as exc:
                    if _classify(exc) != "bad_row":
                        self._rollback()
                        raise SinkError(f"while isolating a refused row in {self.table}: "
                                        f"{type(exc).__name__}: {str(exc).strip()}") from None
                    cur.execute("ROLLBACK TO SAVEPOINT readings_row")
                    bad, bad_exc = r, exc
                    break
                cur.execute("RELEASE SAVEPOINT readings_row")
        self._conn.commit()                   # rows that arrived before the bad one stay
        if bad is None:
            log.warning("readings sink: the batch failed (%s) but every row went in alone", batch_exc)
            return
        assert bad_exc is not None
        diag = getattr(bad_exc, "diag", None)
        column = getattr(diag, "column_name", None) if diag is not None else None
        if column is None:
            column = self._guess_column(bad, bad_exc)
        raise BadRowError(bad[0], column, str(bad_exc).strip().splitlines()[0],
                          getattr(bad_exc, "sqlstate", None))

    @staticmethod
    def _guess_column(row: tuple, exc: psycopg.Error) -> str | None:
        state = getattr(exc, "sqlstate", None) or ""
        text = str(exc)
        if state == "23514" and "score" in text:
            return "score"
        if state.startswith("54") and "index" in text:
            return "id"                       # the primary-key index holds only id
        if state == "23505":
            return "id"
        return None

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 2000.0, 0.01)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # noqa: BLE001 - stored; raised by process()/close()
                        log.error("readings sink: flush failed, the task will fail with: %s", exc)
                        self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    # -- ForeachWriter ----------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called twice")
        self._connect()                       # raises on failure; never returns False
        self._opened = True
        self._partition = partition_id
        if self.max_dwell_ms > 0:
            self._stop.clear()
            self._timer = threading.Thread(target=self._timer_loop, name="readings-sink-timer", daemon=True)
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        if not self._opened:
            raise SinkError("process() before open() or after close(): the row would be lost")
        with self._lock:
            self._raise_stored()
            try:
                values = _check_row(_as_mapping(row))
            except BadRowError as exc:
                # keep what arrived before the bad row, then fail naming it
                try:
                    self._flush_locked()
                except BaseException as flush_exc:  # noqa: BLE001 - an earlier row is the first culprit
                    self._error = flush_exc
                    log.error("readings sink: %s", flush_exc)
                    raise
                self._error = exc
                log.error("readings sink: %s", exc)
                raise
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._buffer.pop(values[0], None)  # re-seen id moves to the end (arrival order)
            self._buffer[values[0]] = values
            if len(self._buffer) >= self.max_batch_rows:
                try:
                    self._flush_locked()
                except BaseException as exc:  # noqa: BLE001
                    self._error = exc
                    log.error("readings sink: %s", exc)
                    raise

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
            self._timer = None
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                else:                         # the task failed: Spark replays the unwritten rows
                    self._buffer.clear()
                    self._rollback()
        finally:
            self._close_conn()
            self._opened = False


def ReadingsWriter(dsn: str, table: str, **options: Any) -> _ReadingsForeachWriter:  # noqa: N802
    """The foreach writer for ``table`` (``readings`` layout), for ``writeStream.foreach``.

    ``options``: ``max_batch_rows`` (1000), ``max_dwell_ms`` (100), ``max_retries`` (6).
    """
    return _ReadingsForeachWriter(dsn, table, **options)
