"""Foreach writer for ``events`` that never holds more than one Postgres
connection per running sink task.

    (df.writeStream
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")
       .start())

Connection budget reasoning (6 connections, 6 concurrent sink tasks)
--------------------------------------------------------------------
* A connection belongs to exactly one task attempt: it is created lazily on
  the task's first row (empty partitions/epochs use no connection at all) and
  is closed in ``close()`` -- in a ``finally`` -- whatever happened: normal
  end, exception in ``process``, failed commit.  PySpark calls ``close(error)``
  whenever ``open`` returned (pyspark/sql/streaming/readwriter.py,
  ``func_with_open_process_close``); ``open`` itself never connects, so an
  exception there can not leak a connection.
* No pool and no module-level cached connection that outlives the task.
  A per-process cache would look attractive ("each Python worker runs its
  partition's tasks one after another") but idle Python workers, workers of
  earlier epochs and speculative/retried attempts would keep holding
  connections while not running a sink task, so the total could exceed 6.
* Belt and braces inside a Python worker process: a process-wide registry
  holds at most one live sink connection.  If, for any reason, a previous task
  in this worker left one open (e.g. close() never ran), it is closed before a
  new one is opened; so one worker process -- which runs one task at a time --
  can never own two.
* Server-side guard for processes that die without closing their socket
  cleanly: the session sets ``idle_in_transaction_session_timeout`` so an
  orphaned, half-finished transaction cannot pin a slot, and TCP keepalives
  let the server notice vanished clients.  (Also recommended: a role-level
  ``ALTER ROLE <sink_role> CONNECTION LIMIT 6`` so the database enforces the
  budget even against misconfiguration.)
* If the connection is lost mid-task, the writer closes it before reconnecting
  once, so a reconnect never makes it two.

Write semantics: newest version wins, idempotent under replay::

    INSERT INTO events (id, version, payload) VALUES (...)
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version,
                                   payload = EXCLUDED.payload
    WHERE events.version < EXCLUDED.version

Older or equal versions (late or replayed rows) are ignored; NULL versions are
treated as oldest (an existing row is never overwritten by a NULL version).
"""

from __future__ import annotations

import threading
import time
from typing import Any, List, Optional

# ---- per-Python-worker guard: at most one live sink connection per process --
_LOCK = threading.Lock()
_LIVE = {"conn": None}


def _release(conn) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass
    with _LOCK:
        if _LIVE["conn"] is conn:
            _LIVE["conn"] = None


def _acquire(dsn: str, connect_timeout: int, app_name: str):
    import psycopg

    with _LOCK:
        leaked, _LIVE["conn"] = _LIVE["conn"], None
    if leaked is not None and not leaked.closed:
        try:
            leaked.close()  # a previous task in this worker did not clean up
        except Exception:
            pass
    conn = psycopg.connect(
        dsn,
        autocommit=False,
        connect_timeout=connect_timeout,
        application_name=app_name,
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
        options="-c idle_in_transaction_session_timeout=60000",
    )
    with _LOCK:
        _LIVE["conn"] = conn
    return conn


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


class EventsWriter:
    """Spark foreach writer; one connection per running task, none in between.

    batch_size: rows per flush/commit (1 = commit each row immediately, the
    real-time default); a non-empty buffer older than max_delay_s is flushed
    on the next row; the remainder is flushed in close().
    """

    def __init__(self, dsn: str, table: str = "events", batch_size: int = 1,
                 max_delay_s: float = 0.05, connect_timeout: int = 10,
                 application_name: str = "events-stream-sink"):
        self.dsn = dsn
        self.table = table
        self.batch_size = max(1, int(batch_size))
        self.max_delay_s = max_delay_s
        self.connect_timeout = connect_timeout
        self.application_name = application_name
        self._conn = None
        self._buf: List[tuple] = []
        self._first_ts: Optional[float] = None
        self._sql = None

    def __getstate__(self):  # never ship a live connection to executors
        st = self.__dict__.copy()
        st.update(_conn=None, _buf=[], _first_ts=None, _sql=None)
        return st

    # ---- foreach protocol -------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        # do NOT connect here: if open() raised, Spark would not call close()
        self._conn = None
        self._buf = []
        self._first_ts = None
        return True

    def process(self, row) -> None:
        if not self._buf:
            self._first_ts = time.monotonic()
        self._buf.append((_get(row, "id"), _get(row, "version"), _get(row, "payload")))
        if (len(self._buf) >= self.batch_size
                or time.monotonic() - self._first_ts >= self.max_delay_s):
            self._flush()

    def close(self, error) -> None:
        try:
            if error is None:
                self._flush()
            elif self._conn is not None and not self._conn.closed:
                try:
                    self._conn.rollback()
                except Exception:
                    pass
        finally:
            conn, self._conn = self._conn, None
            self._buf = []
            _release(conn)

    # ---- internals -----------------------------------------------------------
    def _statement(self):
        if self._sql is None:
            from psycopg import sql

            t = sql.Identifier(*self.table.split("."))
            self._sql = sql.SQL(
                "INSERT INTO {t} AS e (id, version, payload) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, "
                "payload = EXCLUDED.payload "
                "WHERE e.version IS NULL AND EXCLUDED.version IS NOT NULL "
                "OR e.version < EXCLUDED.version"
            ).format(t=t)
        return self._sql

    def _connection(self):
        if self._conn is None or self._conn.closed:
            self._conn = _acquire(self.dsn, self.connect_timeout, self.application_name)
        return self._conn

    def _flush(self) -> None:
        if not self._buf:
            return
        import psycopg

        buf = self._buf
        for attempt in (1, 2):
            conn = self._connection()
            try:
                with conn.cursor() as cur:
                    cur.executemany(self._statement(), buf)
                conn.commit()
                break
            except psycopg.OperationalError:
                if attempt == 2 or not conn.broken:
                    raise
                # connection died: close it first, then reconnect once
                _release(conn)
                self._conn = None
        self._buf = []
        self._first_ts = None
