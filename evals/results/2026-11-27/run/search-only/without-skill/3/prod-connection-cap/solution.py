"""Foreach writer for ``events`` that holds at most ONE Postgres connection
per running task, across all epochs.

    query = (df.writeStream
               .foreach(EventsWriter(dsn, "events"))
               .outputMode("update")
               .trigger(realTime="5 minutes")
               .option("checkpointLocation", ckpt)
               .start())

Connection discipline (budget = 6 connections, 6 concurrent sink tasks):

* A connection is opened in ``open()`` (i.e. on the executor, per task and
  epoch) and is ALWAYS closed in ``close()``, whether the task succeeded or
  failed -- nothing is cached at module level for "reuse" across epochs.
  A cache like that is exactly what leaks: Python workers are reused and
  sometimes replaced, and each idle worker would keep its own connection
  alive, so the total creeps above the number of running tasks.
* A Python worker runs one task at a time, so there is a per-process guard:
  if a previous task in this process somehow left a connection open (e.g.
  ``close`` was skipped because of an interrupt), it is closed *before* the
  new one is opened.  Hence one process never holds two connections.
* If connecting fails half way, nothing is left behind.
* No connection is created on the driver or in ``__init__`` (the writer
  object is pickled to the executors), and no pool is used.

Writes: per-row upsert, "newest version wins"
(``ON CONFLICT (id) DO UPDATE ... WHERE events.version < EXCLUDED.version``),
autocommit so rows are visible immediately in real-time mode and a replayed
epoch is harmless.

Works with psycopg2 (preferred when installed) or psycopg 3.
"""

import os
import threading

# One live connection per Python worker process at most (guard, see above).
_LIVE = {"conn": None, "pid": None}
_LOCK = threading.Lock()


def _quote_ident(name):
    parts = name.split(".")
    return ".".join('"' + p.strip('"').replace('"', '""') + '"' for p in parts)


def _connect(dsn):
    try:
        import psycopg2  # type: ignore

        conn = psycopg2.connect(dsn)
        try:
            conn.autocommit = True
        except Exception:
            conn.close()
            raise
        return conn
    except ImportError:
        import psycopg  # type: ignore

        return psycopg.connect(dsn, autocommit=True)


def _safe_close(conn):
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass


class EventsWriter:
    """PySpark ForeachWriter-style object (open / process / close)."""

    def __init__(self, dsn, table="events"):
        self.dsn = dsn
        self.table = table
        self._conn = None
        self._cur = None
        t = _quote_ident(table)
        self._sql = (
            "INSERT INTO %s AS t (\"id\", \"version\", \"payload\") "
            "VALUES (%%s, %%s, %%s) "
            "ON CONFLICT (\"id\") DO UPDATE SET "
            "\"version\" = EXCLUDED.\"version\", \"payload\" = EXCLUDED.\"payload\" "
            "WHERE t.\"version\" IS NULL OR t.\"version\" < EXCLUDED.\"version\"" % t
        )

    # Never ship a live connection inside the pickled writer.
    def __getstate__(self):
        st = dict(self.__dict__)
        st["_conn"] = None
        st["_cur"] = None
        return st

    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        with _LOCK:
            # Close any connection a previous task of this worker left open.
            if _LIVE["conn"] is not None and _LIVE["pid"] == os.getpid():
                _safe_close(_LIVE["conn"])
            _LIVE["conn"] = None
            conn = _connect(self.dsn)
            _LIVE["conn"] = conn
            _LIVE["pid"] = os.getpid()
        self._conn = conn
        self._cur = conn.cursor()
        return True

    def process(self, row):
        rid, version, payload = row["id"], row["version"], row["payload"]
        try:
            self._cur.execute(self._sql, (rid, version, payload))
        except Exception as exc:
            raise RuntimeError(
                "events upsert failed for id=%r version=%r: %s" % (rid, version, exc)
            ) from exc

    def close(self, error):
        conn, self._conn, self._cur = self._conn, None, None
        try:
            _safe_close(conn)
        finally:
            with _LOCK:
                if _LIVE["conn"] is conn:
                    _LIVE["conn"] = None
        # PySpark re-raises ``error`` itself after close(); nothing hidden.
