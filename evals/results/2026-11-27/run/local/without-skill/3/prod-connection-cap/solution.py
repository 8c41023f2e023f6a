"""Foreach writer for ``events`` that never holds more than one Postgres
connection per running sink task.

Table::

    events(id text primary key, version bigint, payload text)   -- newest version wins

Usage (6 partitions -> 6 concurrent sink tasks -> at most 6 connections)::

    (df.repartition(6)            # or a source that already has 6 partitions
       .writeStream
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ...)
       .trigger(realTime="5 minutes")
       .start())

How the cap is enforced
-----------------------
* The writer object only holds settings.  Spark pickles it to the executors
  and unpickles a *fresh copy for every task* (every partition of every
  epoch), so a connection kept on ``self`` would never be reused; a connection
  opened in ``open`` and not closed in ``close`` leaks one connection per
  partition per epoch - which is how a 6-connection budget is blown in
  minutes.
* Here the connection's lifetime is exactly the task's lifetime:
  ``open(partition_id, epoch_id)`` opens it, ``close(error)`` *always* closes
  it (success, failure, rollback errors included).  A task that is not running
  holds no connection, so #connections <= #running sink tasks <= 6, in every
  epoch and after the query stops (0).
* ``open`` is called by Spark *outside* its try/finally: if anything fails
  after connecting inside ``open``, ``close`` would never run - so ``open``
  closes its own connection before re-raising.
* Belt and braces for the reused Python worker (it runs its tasks one after
  another): a module-level slot records the connection currently open in this
  process.  Before opening a new one, a still-open connection left by an
  earlier task of the same worker (e.g. ``close`` never ran because the task
  was interrupted) is closed first, so one worker process can never hold two.
* Never uses a connection pool: a pool per worker would keep idle connections
  after its task ended (and one per epoch-copy of the writer if created
  per-instance).
* TCP keepalives let Postgres/Lakebase notice and free connections of
  executors that died without closing the socket.

Upsert
------
``INSERT .. ON CONFLICT (id) DO UPDATE .. WHERE events.version < EXCLUDED.version``
(NULL stored version counts as oldest; a NULL incoming version never replaces
a non-NULL one).  Order of arrival therefore does not matter, replays are
idempotent, and older versions arriving late are ignored.  Rows buffered in
one flush are first reduced to the newest version per id.
"""

from __future__ import annotations

import threading

import psycopg
from psycopg import sql

# One slot per Python worker process: the connection of the task running now.
_SLOT_LOCK = threading.Lock()
_ACTIVE_CONN = None


def _close_quietly(conn) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass


def _table_identifier(table: str) -> sql.Composable:
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return sql.Identifier(*parts)


def build_upsert(table: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {t} AS e (id, version, payload) "
        "VALUES (%s::text, %s::bigint, %s::text) "
        "ON CONFLICT (id) DO UPDATE "
        "SET version = EXCLUDED.version, payload = EXCLUDED.payload "
        "WHERE e.version IS NULL "
        "   OR (EXCLUDED.version IS NOT NULL AND EXCLUDED.version > e.version)"
    ).format(t=_table_identifier(table))


def _get(row, name):
    try:
        return row[name]
    except (KeyError, IndexError, TypeError, ValueError):
        return getattr(row, name, None)


def _newer(a, b) -> bool:
    """True if version a should replace version b."""
    if b is None:
        return True
    return a is not None and a > b


class EventsWriter:
    """Foreach writer (open/process/close); one connection per running task."""

    def __init__(self, dsn: str, table: str = "events", flush_rows: int = 1,
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.flush_rows = max(1, int(flush_rows))
        self.connect_timeout = connect_timeout
        self._conn = None
        self._buf: dict = {}
        self._query = None

    # Never ship a live connection inside the pickled writer.
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_conn"] = None
        state["_buf"] = {}
        return state

    # -- foreach protocol ----------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        global _ACTIVE_CONN
        self._buf = {}
        self._query = build_upsert(self.table)
        with _SLOT_LOCK:
            # A connection left behind by an earlier task in this worker.
            stale, _ACTIVE_CONN = _ACTIVE_CONN, None
        _close_quietly(stale)
        conn = None
        try:
            conn = psycopg.connect(
                self.dsn,
                autocommit=False,
                connect_timeout=self.connect_timeout,
                application_name=f"events-sink p{partition_id}",
                keepalives=1, keepalives_idle=30,
                keepalives_interval=10, keepalives_count=3,
            )
        except BaseException:
            _close_quietly(conn)
            raise
        self._conn = conn
        with _SLOT_LOCK:
            _ACTIVE_CONN = conn
        return True

    def process(self, row) -> None:
        rid = _get(row, "id")
        ver = _get(row, "version")
        cur = self._buf.get(rid)
        if cur is None or _newer(ver, cur[1]):
            self._buf[rid] = (rid, ver, _get(row, "payload"))
        if len(self._buf) >= self.flush_rows:
            self._flush()

    def close(self, error) -> None:
        global _ACTIVE_CONN
        conn, self._conn = self._conn, None
        try:
            if conn is not None and error is None:
                self._flush(conn)
            elif conn is not None and not conn.broken:
                try:
                    conn.rollback()
                except Exception:
                    pass
        finally:
            self._buf = {}
            _close_quietly(conn)
            with _SLOT_LOCK:
                if _ACTIVE_CONN is conn:
                    _ACTIVE_CONN = None

    # -- internals -----------------------------------------------------------
    def _flush(self, conn=None) -> None:
        conn = conn or self._conn
        if not self._buf:
            return
        rows = list(self._buf.values())
        with conn.cursor() as cur:
            cur.executemany(self._query, rows)
        conn.commit()
        self._buf = {}


__all__ = ["EventsWriter", "build_upsert"]
