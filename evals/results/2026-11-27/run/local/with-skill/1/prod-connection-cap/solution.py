"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

``EventsWriter(dsn, table)`` is a PySpark ``foreach`` writer (``open`` / ``process`` /
``close``) for a real-time query::

    query = (events.writeStream
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")    # how often it checkpoints, not a latency
             .start())

Connection budget (6 connections, 6 sink tasks at a time)
---------------------------------------------------------
A connection lives exactly as long as the task that opened it:

* nothing connects on the driver or in ``__init__``: only the configuration is pickled;
* ``open()`` makes the task's one connection. If ``open()`` fails after connecting, it
  closes that connection itself, because PySpark does not call ``close()`` when ``open()``
  raises (``func_with_open_process_close`` in ``pyspark/sql/streaming/readwriter.py``);
* the flusher timer thread writes on that same connection (under a lock): no second one;
* a lost connection is closed *before* the replacement is made, never beside it;
* ``close(error)`` closes the connection in a ``finally``, whether the task succeeded,
  failed, or the final flush raised;
* defensive: inside a Spark task, ``open()`` first closes any connection a previous task
  of the same Python worker left open (a worker runs one task at a time, so such a
  connection can only be a leak), so a worker process never holds two.

So the sink holds one connection per running task and none between tasks: at most 6
with 6 concurrent tasks, whatever the number of epochs. (A connection kept per Python worker
between tasks, the pack's pooled default, saves a login per task but holds idle
connections in workers that are not running a sink task; with a hard cap of 6 this writer
does not keep them.) Plan one more per task that Spark may re-run while Postgres has not
yet dropped the lost attempt's session. The writer also sets TCP keepalives so the server
notices a killed executor's session within about a minute.

Writes
------
Upsert on ``id`` keeping the newest ``version``: ``ON CONFLICT (id) DO UPDATE ... WHERE
stored.version IS NULL OR stored.version < EXCLUDED.version``, so a row replayed after a
failure (delivery is at-least-once) never overwrites a newer one. Within a task, one row per
id is buffered (the highest version wins); the buffer is flushed, sorted by id (no deadlocks
between tasks sharing ids), when ``max_batch_rows`` ids are waiting or its oldest row is
``max_dwell_ms`` old (a timer, because under real-time mode ``close()`` only comes at the end
of a long batch). ``open()`` never returns ``False``; errors raise.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import weakref
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

#: Connections this module opened in this process and has not closed yet, with the Spark
#: task attempt that owns each (None outside Spark). Used to close leaks, and by tests.
_LIVE: "weakref.WeakKeyDictionary[psycopg.Connection, int | None]" = weakref.WeakKeyDictionary()
_LIVE_LOCK = threading.Lock()


def _task_attempt() -> int | None:
    try:
        from pyspark.taskcontext import TaskContext
    except ImportError:  # pragma: no cover
        return None
    context = TaskContext.get()
    return context.taskAttemptId() if context is not None else None


def live_connections() -> int:
    """Connections opened by this module in this process and still open."""
    with _LIVE_LOCK:
        return sum(1 for c in list(_LIVE) if not c.closed)


def _close_leaked(current_attempt: int) -> None:
    """In a Spark task: close connections left by earlier tasks of this Python worker."""
    with _LIVE_LOCK:
        leaked = [c for c, owner in list(_LIVE.items()) if owner != current_attempt and not c.closed]
    for conn in leaked:
        log.warning("events sink: closing a connection an earlier task of this worker left open")
        _close_quietly(conn)


def _close_quietly(conn: psycopg.Connection | None) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # closing must never mask the real error
        pass
    with _LIVE_LOCK:
        _LIVE.pop(conn, None)


def _split_table(table: str) -> sql.Identifier:
    """'events', 'schema.events' (folded to lower case as SQL does) or '"Schema"."Events"'."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty name, got {table!r}")
    names, buf, quoted, i = [], "", False, 0
    while i < len(table):
        c = table[i]
        if quoted:
            if c == '"' and table[i + 1:i + 2] == '"':
                buf, i = buf + '"', i + 1
            elif c == '"':
                quoted = False
            else:
                buf += c
        elif c == '"':
            quoted = True
        elif c == ".":
            names.append(buf)
            buf = ""
        else:
            buf += c.lower()
        i += 1
    names.append(buf)
    if quoted or len(names) > 2 or any(not n for n in names):
        raise ValueError(f"cannot read table name {table!r}")
    return sql.Identifier(*names)


class EventsSinkError(RuntimeError):
    pass


class EventsWriter:
    """``foreach`` writer: newest-version upsert into ``events``; one connection per running task."""

    def __init__(self, dsn: str, table: str = "events", max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                 connect_timeout_s: int = 10):
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("need max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms, self.max_retries = max_batch_rows, max_dwell_ms, max_retries
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        self.connect_timeout_s = connect_timeout_s
        self._statement = self._build_statement()  # a bad table name fails on the driver
        self._reset()

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s")

    def __getstate__(self) -> dict:  # only configuration travels; never a connection
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._statement = self._build_statement()
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"EventsWriter(table={self.table!r})"

    def _build_statement(self) -> sql.Composed:
        t = _split_table(self.table)
        return sql.SQL(
            "INSERT INTO {t} AS cur (id, version, payload) VALUES (%s::text, %s::bigint, %s::text) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE cur.version IS NULL OR cur.version < EXCLUDED.version").format(t=t)

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.Lock()  # one user of the connection at a time
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._open = False
        self.connects = 0  # logins this task made (1 unless a connection was lost)

    # -- the foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._open:  # a second open() would orphan the first connection
            raise EventsSinkError("open() called twice without close()")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._attempt = _task_attempt()
        if self._attempt is not None:
            _close_leaked(self._attempt)
        try:
            self._conn = self._connect()
            if self.max_dwell_ms > 0:
                self._timer = threading.Thread(target=self._tick, daemon=True,
                                               name=f"events-flusher-p{partition_id}")
                self._timer.start()
        except BaseException:
            # PySpark does not call close() when open() raises: release everything here.
            self._stop.set()
            _close_quietly(self._conn)
            self._conn = None
            raise
        self._open = True
        return True  # never False: Spark would drop this partition's rows silently

    def process(self, row: Any) -> None:
        if not self._open:
            raise EventsSinkError("process() on a writer that is not open; the row was not written")
        rid, version, payload = row["id"], row["version"], row["payload"]
        if rid is None:
            raise EventsSinkError(f"row with a null id (version={version!r}) cannot be upserted")
        with self._lock:
            if self._error is not None:
                raise self._error
            held = self._buffer.get(rid)
            # newest version wins inside the buffer too (a null version never displaces a row)
            if held is None or (version is not None and (held[1] is None or version > held[1])):
                self._buffer[rid] = (rid, version, payload)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._stop.set()
        try:
            if self._timer is not None:
                self._timer.join()
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()
                else:
                    self._buffer.clear()  # Spark replays the epoch
        finally:
            conn, self._conn = self._conn, None
            _close_quietly(conn)  # always: success, failure, or a failed final flush

    # -- flushing ------------------------------------------------------------------------------
    def _tick(self) -> None:
        period = max(self.max_dwell_ms / 4000, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None or self._stop.is_set():
                    return
                if self._oldest is not None and (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or close()
                        log.error("events sink: flush failed: %s", exc)
                        return

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        batch = [self._buffer[k] for k in sorted(self._buffer)]
        try:
            self._write(batch)
        except BaseException as exc:
            self._error = exc
            raise
        self._buffer.clear()
        self._oldest = None

    def _write(self, batch: list[tuple]) -> None:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.transaction():
                    with self._conn.cursor() as cur:
                        cur.executemany(self._statement, batch)
                return
            except (psycopg.OperationalError, psycopg.InterfaceError,
                    psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                state = getattr(exc, "sqlstate", None)
                if attempt >= self.max_retries:
                    raise EventsSinkError(f"events sink: flush of {len(batch)} rows failed after "
                                          f"{attempt + 1} attempts: {type(exc).__name__} ({state})") from None
                if state not in ("40001", "40P01"):
                    # replace, never add: the broken connection is closed before a new one is made
                    conn, self._conn = self._conn, None
                    _close_quietly(conn)
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)

    def _connect(self) -> psycopg.Connection:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            conn = None
            try:
                conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s,
                                       application_name=f"events-sink pid={os.getpid()}",
                                       keepalives=1, keepalives_idle=30, keepalives_interval=10,
                                       keepalives_count=3)
                with _LIVE_LOCK:
                    _LIVE[conn] = self._attempt if hasattr(self, "_attempt") else None
                self.connects += 1
                return conn
            except psycopg.OperationalError as exc:
                _close_quietly(conn)
                if attempt >= self.max_retries:
                    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise EventsSinkError(f"events sink: cannot connect after {attempt + 1} attempts: {first}") from None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
        raise AssertionError("unreachable")


__all__ = ["EventsWriter", "EventsSinkError", "live_connections"]
