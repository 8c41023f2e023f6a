"""Foreach writer for ``events`` that never holds more than one Postgres
connection per *running* sink task, across all epochs.

Budget: 6 connections; the sink stage runs 6 tasks at a time; a new epoch every
few seconds; Python workers are reused (``spark.python.worker.reuse=true``) and
run their partitions' tasks one after another.

Why not a per-process cached connection / pool?
    A connection cached in a module global survives the task. Spark keeps idle
    Python workers around (they are only reaped after ~1 minute idle) and may
    fork extra workers when the executor runs other Python work or when tasks
    of the next epoch land on a different worker. Each of those idle workers
    would keep its cached connection while 6 *other* workers run the 6 current
    tasks -> more than 6 connections against a 6-connection budget. A pool per
    worker is worse (N per process).

So the connection's lifetime is tied to the task:
    * opened lazily on the first row of the task (an empty partition in an
      epoch opens nothing);
    * closed in ``close()``, which PySpark calls in a ``finally`` after the
      partition's rows, on success and on error;
    * ``open()`` does no I/O, so it cannot fail after acquiring a connection
      (PySpark does *not* call ``close()`` if ``open()`` raises);
    * at most one connection per Python process at any time: a module-level
      slot holds the live connection; if a previous task in this reused worker
      somehow left one behind (e.g. it was interrupted before ``close``), it is
      closed before a new one is opened, and any reconnect closes the old
      connection first. An ``atexit`` hook closes it when the worker exits.
Since one worker runs one task at a time, connections <= running tasks <= 6.

Deployment notes (outside this file) that keep the bound true:
    * keep ``spark.speculation=false`` for this query (a speculative copy is a
      second running task for the same partition and would need its own slot);
    * optionally give the sink its own role with ``ALTER ROLE ... CONNECTION
      LIMIT 6`` as a server-side safety net;
    * connect cost is paid once per task per epoch; if that is too slow, put a
      transaction-mode PgBouncer (or the Lakebase pooler) in front rather than
      caching connections in workers.

Semantics: ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE stored.version <
EXCLUDED.version`` - newest version wins regardless of arrival order or task
interleaving; replays (foreach is at-least-once) are no-ops. Each row is
committed right away (autocommit) so real-time mode does not wait for the
epoch's end.
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Optional

import psycopg
from psycopg import sql

# ---------------------------------------------------------------------------
# one connection slot per Python worker process
# ---------------------------------------------------------------------------
_slot_lock = threading.Lock()
_slot_conn: Optional[psycopg.Connection] = None
_slot_pid: Optional[int] = None


def _close_quietly(conn: Optional[psycopg.Connection]) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass


def _release_slot(conn: Optional[psycopg.Connection] = None) -> None:
    """Close the process's connection (only if it is ``conn`` when given)."""
    global _slot_conn, _slot_pid
    with _slot_lock:
        if _slot_conn is None or (conn is not None and _slot_conn is not conn):
            if conn is not None:
                _close_quietly(conn)
            return
        victim, _slot_conn, _slot_pid = _slot_conn, None, None
    _close_quietly(victim)


def _acquire_slot(dsn: str, **kwargs: Any) -> psycopg.Connection:
    """Open the single connection of this process, closing any leftover first."""
    global _slot_conn, _slot_pid
    with _slot_lock:
        leftover = _slot_conn
        if _slot_pid is not None and _slot_pid != os.getpid():
            leftover = None  # inherited across fork: not ours to close
        _slot_conn, _slot_pid = None, None
    _close_quietly(leftover)
    conn = psycopg.connect(dsn, **kwargs)
    with _slot_lock:
        _slot_conn, _slot_pid = conn, os.getpid()
    return conn


atexit.register(_release_slot)


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*[p.strip('"') for p in table.split(".")])


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        return getattr(row, name, None)


class EventsWriter:
    """``df.writeStream.foreach(EventsWriter(dsn, "events"))``"""

    def __init__(self, dsn: str, table: str = "events",
                 application_name: str = "events-foreach-sink",
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.application_name = application_name
        self.connect_timeout = connect_timeout
        self._conn: Optional[psycopg.Connection] = None
        self._sql: Optional[str] = None

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_conn"] = None
        d["_sql"] = None
        return d

    def _upsert(self) -> sql.Composed:
        t = _table_ident(self.table)
        return sql.SQL(
            "INSERT INTO {t} AS cur (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE "
            "SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE cur.version IS NULL OR cur.version < EXCLUDED.version"
        ).format(t=t)

    # ------------------------------------------------------------ lifecycle
    def open(self, partition_id: int, epoch_id: int) -> bool:
        # No I/O here: if open() raised after connecting, PySpark would never
        # call close() and the connection would leak.
        self._conn = None
        return True

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = _acquire_slot(
                self.dsn, autocommit=True,
                connect_timeout=self.connect_timeout,
                application_name=self.application_name)
            self._sql = self._upsert().as_string(self._conn)
        return self._conn

    def process(self, row: Any) -> None:
        conn = self._connection()
        conn.execute(self._sql, (_get(row, "id"), _get(row, "version"), _get(row, "payload")))

    def close(self, error: Optional[BaseException]) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _release_slot(conn)
        # a pending error is re-raised by PySpark itself


__all__ = ["EventsWriter"]
