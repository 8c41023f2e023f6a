"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

    from solution import EventsWriter
    (df.repartition(6, "id")               # or a 6-partition Kafka topic: 6 sink tasks
       .writeStream
       .foreach(EventsWriter("host=... dbname=... user=... sslmode=require", "events"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/events")
       .trigger(realTime="5 minutes")      # the checkpoint interval, not a latency
       .start())

Table: ``events (id text primary key, version bigint, payload text)``; the newest
``version`` wins.

Connection budget (6 connections for 6 concurrently running sink tasks)
----------------------------------------------------------------------
Every sink task holds exactly one connection, and only while it runs:

* ``open()`` makes the task's only connection; if anything in ``open()`` fails
  after connecting, the connection is closed before the error propagates
  (PySpark does not call ``close()`` when ``open()`` raises).
* ``close()`` closes it on every path -- success, task error, failed flush --
  in a ``finally``.  Nothing is pooled, cached in a module global or kept by a
  Python worker between tasks, so an idle worker (Spark may start more Python
  workers than running tasks, and a long batch's tasks need not land on the
  same worker each epoch) holds zero connections.  Between epochs the count
  drops to 0; at most one connection per *running* task exists at any time:
  6 tasks -> at most 6 connections, across any number of epochs.
* A reconnect after a lost connection closes the old connection first, so a
  task never holds two.  The timer flush thread shares the task's connection
  (under a lock) and is stopped and joined before ``close()`` flushes and
  closes, so it can never open a connection after the task ended.
* Connections carry ``application_name=events-foreach-sink`` so the budget can be
  watched in ``pg_stat_activity``, plus TCP keepalives so a dead peer is noticed.

The price is one login per task per epoch (under real-time mode one per long
batch, i.e. per trigger interval: cheap).  Do not add a connection pool here: a
pool kept per Python worker holds an idle connection in every worker that is not
running a sink task, which is exactly what breaks a 6-connection cap.  Also size
the sink stage to the budget: the partition count of the stage that runs
``foreach`` is the number of concurrent connections (6 here), and a task retried
after a lost executor can overlap briefly with its predecessor's connection until
Postgres notices it is gone (keepalives bound that), so keep a little headroom in
the database's own cap (admins, migrations).

Delivery to foreach is at-least-once, so the write is an idempotent upsert with a
version guard: ``ON CONFLICT (id) DO UPDATE ... WHERE t.version IS NULL OR
t.version < EXCLUDED.version`` (a replayed or older row never overwrites a newer
one); inside one flush the highest version per id is kept.  Under real-time mode
``open()``/``close()`` run once per long batch, so rows are flushed from
``process()`` and by a dwell timer, not only in ``close()``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("events_sink")

COLUMNS: tuple[str, ...] = ("id", "version", "payload")
CASTS = {"id": "text", "version": "bigint", "payload": "text"}
_MAX_ROWS_PER_STATEMENT = 1000
_TRANSIENT_CODES = {"40001", "40P01", "57P01", "57P02", "57P03", "25006", "40003", "53300"}


class SinkError(RuntimeError):
    pass


def _qualified(table: str) -> sql.Composable:
    parts = table.split(".")
    if len(parts) > 2 or any(not p for p in parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _transient(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)) and \
            not isinstance(exc, psycopg.DataError)
    return state.startswith("08") or state in _TRANSIENT_CODES


def _newer(a: tuple, b: tuple) -> bool:
    """Is buffered row ``a`` newer than ``b`` (version column at index 1; None is oldest)?"""
    va, vb = a[1], b[1]
    if va is None:
        return False
    return vb is None or va > vb


class _EventsForeachWriter:
    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 6, connect_timeout_s: int = 10) -> None:
        if not dsn or not table:
            raise ValueError("dsn and table are required")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0 or connect_timeout_s < 1:
            raise ValueError("bad batching/retry settings")
        _qualified(table)
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.connect_timeout_s = connect_timeout_s
        self._reset_runtime()

    # only settings are pickled to the executors; no connection ever travels or lingers
    def _reset_runtime(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._opened = False
        self._closing = False

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("dsn", "table", "max_batch_rows", "max_dwell_ms",
                                              "max_retries", "connect_timeout_s")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:
        return f"EventsWriter(table={self.table!r})"

    # -- SQL -----------------------------------------------------------------------------
    def _statement(self, nrows: int) -> sql.Composed:
        row = sql.SQL("({})").format(sql.SQL(", ").join(sql.SQL("%s::" + CASTS[c]) for c in COLUMNS))
        return sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) VALUES {rows} "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version").format(
            t=_qualified(self.table), rows=sql.SQL(", ").join([row] * nrows))

    # -- the task's one connection --------------------------------------------------------
    def _connect(self) -> None:
        """Open the task's connection; the previous one (if any) is closed first."""
        self._close_conn()
        attempt = 0
        while True:
            try:
                self._conn = psycopg.connect(
                    self.dsn, autocommit=False, application_name="events-foreach-sink",
                    connect_timeout=self.connect_timeout_s,
                    keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
                return
            except psycopg.OperationalError as exc:
                attempt += 1
                text = str(exc).lower()
                permanent = any(s in text for s in ("authentication failed", "does not exist",
                                                    "permission denied", "no pg_hba.conf"))
                if permanent or attempt > self.max_retries:
                    raise SinkError(f"cannot connect to Postgres for {self.table}: {str(exc).strip()}") from None
                # "too many connections" lands here too: wait for a slot rather than fail
                time.sleep(min(5.0, 0.25 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    # -- flush (caller holds the lock) ----------------------------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]   # sorted keys: no deadlocks between tasks
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    for i in range(0, len(rows), _MAX_ROWS_PER_STATEMENT):
                        chunk = rows[i:i + _MAX_ROWS_PER_STATEMENT]
                        cur.execute(self._statement(len(chunk)), [v for r in chunk for v in r])
                self._conn.commit()
                break
            except psycopg.Error as exc:
                try:
                    if self._conn is not None and not self._conn.closed:
                        self._conn.rollback()
                except Exception:  # noqa: BLE001
                    self._close_conn()
                if _transient(exc) and attempt < self.max_retries:
                    attempt += 1
                    state = getattr(exc, "sqlstate", None)
                    if state not in ("40001", "40P01"):
                        self._close_conn()          # reconnect: the old connection is gone first
                    time.sleep(min(5.0, 0.25 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))
                    continue
                raise SinkError(f"flush of {len(rows)} rows to {self.table} failed "
                                f"[SQLSTATE {getattr(exc, 'sqlstate', None)}]: {str(exc).strip()}") from None
        self._buffer.clear()
        self._oldest = None

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 2000.0, 0.01)
        while not self._stop.wait(period):
            with self._lock:
                if self._closing or self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # noqa: BLE001 - raised by the next process()/close()
                        log.error("events sink: flush failed: %s", exc)
                        self._error = exc

    # -- ForeachWriter contract -------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called twice on one writer")
        self._closing = False
        try:
            self._connect()
            self._opened = True
            if self.max_dwell_ms > 0:
                self._stop.clear()
                self._timer = threading.Thread(target=self._timer_loop, name="events-sink-timer", daemon=True)
                self._timer.start()
        except BaseException:
            # PySpark skips close() when open() raises: release the connection here
            self._opened = False
            self._close_conn()
            raise
        return True                       # never False: Spark would drop the partition silently

    def process(self, row: Any) -> None:
        if not self._opened:
            raise SinkError("process() before open() or after close(): the row would be lost")
        data = row.asDict() if hasattr(row, "asDict") else dict(row)
        key = data["id"]
        if key is None:
            raise SinkError(f"row with a null id (version={data.get('version')!r})")
        values = (key, data["version"], data["payload"])
        with self._lock:
            if self._error is not None:
                raise self._error
            current = self._buffer.get(key)
            if current is None or _newer(values, current):   # newest version wins inside a flush too
                if current is None and self._oldest is None:
                    self._oldest = time.monotonic()
                self._buffer[key] = values
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            self._close_conn()
            return
        self._closing = True
        self._stop.set()
        try:
            if self._timer is not None:
                self._timer.join()
                self._timer = None
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()
                else:
                    self._buffer.clear()          # Spark replays the epoch; the upsert makes it harmless
        finally:
            self._close_conn()                    # the task's connection ends with the task, always
            self._opened = False


def EventsWriter(dsn: str, table: str, **options: Any) -> _EventsForeachWriter:  # noqa: N802
    """The foreach writer for ``table`` (``events`` layout) for ``writeStream.foreach``.

    One connection per running task, opened in ``open()`` and closed in ``close()``.
    ``options``: ``max_batch_rows`` (1000), ``max_dwell_ms`` (100), ``max_retries`` (6),
    ``connect_timeout_s`` (10).
    """
    return _EventsForeachWriter(dsn, table, **options)
