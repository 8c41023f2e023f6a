"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

Usage::

    (df.writeStream
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")
       .start())

Connection budget
-----------------
A Python worker process runs the sink tasks of its partition one after
another (worker reuse, ``spark.python.worker.reuse=true`` -- the default), so
a process never runs two sink tasks at the same time.  The writer therefore
keeps exactly **one connection per Python worker process**:

* ``open()`` borrows the process' connection (creating it only if the process
  has none, or if the old one is broken -- the broken one is closed *first*);
* ``close()`` hands it back instead of closing it, so the next epoch's task in
  the same worker reuses it: no connect/disconnect storm every few seconds, no
  window where an exiting backend and a new one are both counted against the
  6-connection budget;
* a process can never hold a second connection: the slot is guarded by a lock
  and a borrowed flag; if (against the assumption above) a second task in the
  same process asked for a connection while the first one still holds it, it
  waits for it instead of opening another one;
* an idle connection is closed by a small daemon reaper after
  ``IDLE_CLOSE_SECONDS`` without a task (and at interpreter exit), so workers
  that stop running sink tasks (query stopped, partitions moved) give their
  connection back to the budget;
* a connection that saw an error is rolled back and discarded (closed) in
  ``close(error)``; the next task opens a fresh one.

With 6 sink tasks running at a time the sink thus uses at most 6 connections,
across all epochs.

The cache lives in a process-global registry (``sys.modules``), not in this
module's globals, so it also works when cloudpickle ships this class *by
value* to the executors (each task then re-creates the module globals, but the
registry is shared by the whole process).

Semantics: upsert, newest version wins
--------------------------------------
Each row is upserted as soon as ``process`` receives it, on the borrowed
autocommit connection (so it is visible immediately -- real-time mode does not
call ``close`` until the end of an epoch)::

    INSERT INTO events AS t (id, version, payload) VALUES (...)
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version,
                                   payload = EXCLUDED.payload
    WHERE t.version IS NULL OR t.version < EXCLUDED.version

so replays, reordering across partitions/epochs and late older versions never
overwrite a newer row (an equal version keeps the stored row).
"""

import atexit
import sys
import threading
import time
import types

IDLE_CLOSE_SECONDS = 15.0   # close a worker's connection after this long with no task

_REGISTRY_NAME = "_events_writer_connection_registry_v1"


def _registry():
    """Process-wide state shared by every copy of this module/class in the process."""
    reg = sys.modules.get(_REGISTRY_NAME)
    if reg is None:
        reg = types.ModuleType(_REGISTRY_NAME)
        reg.lock = threading.Condition(threading.Lock())
        reg.slots = {}          # dsn -> {"conn": conn|None, "busy": bool, "last": float}
        reg.reaper = None
        reg.atexit_registered = False
        sys.modules[_REGISTRY_NAME] = reg
    return reg


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=True)


def _is_usable(conn):
    try:
        if getattr(conn, "closed", False):
            return False
        # psycopg2: closed is int (0 == open); psycopg3: closed is bool
        return True
    except Exception:
        return False


def _safe_close(conn):
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass


def _close_all():
    reg = _registry()
    with reg.lock:
        for slot in reg.slots.values():
            if not slot["busy"]:
                _safe_close(slot["conn"])
                slot["conn"] = None


def _reaper_loop():
    reg = _registry()
    while True:
        time.sleep(1.0)
        now = time.time()
        with reg.lock:
            for slot in reg.slots.values():
                if (slot["conn"] is not None and not slot["busy"]
                        and now - slot["last"] >= IDLE_CLOSE_SECONDS):
                    _safe_close(slot["conn"])
                    slot["conn"] = None


def _ensure_reaper(reg):
    # caller holds reg.lock
    if reg.reaper is None or not reg.reaper.is_alive():
        t = threading.Thread(target=_reaper_loop, name="events-writer-conn-reaper")
        t.daemon = True
        t.start()
        reg.reaper = t
    if not reg.atexit_registered:
        atexit.register(_close_all)
        reg.atexit_registered = True


def _borrow(dsn):
    reg = _registry()
    with reg.lock:
        slot = reg.slots.setdefault(dsn, {"conn": None, "busy": False, "last": time.time()})
        while slot["busy"]:          # never open a 2nd connection in this process
            reg.lock.wait(1.0)
        slot["busy"] = True
        conn = slot["conn"]
        slot["conn"] = None
        _ensure_reaper(reg)
    if conn is not None and not _is_usable(conn):
        _safe_close(conn)
        conn = None
    if conn is None:
        try:
            conn = _connect(dsn)
        except Exception:
            _give_back(dsn, None)
            raise
    return conn


def _give_back(dsn, conn):
    reg = _registry()
    with reg.lock:
        slot = reg.slots.setdefault(dsn, {"conn": None, "busy": False, "last": time.time()})
        if slot["conn"] is not None and slot["conn"] is not conn:
            _safe_close(slot["conn"])  # defensive: keep at most one
        slot["conn"] = conn
        slot["busy"] = False
        slot["last"] = time.time()
        reg.lock.notify_all()


def _quote_ident(name):
    return '"' + str(name).replace('"', '""') + '"'


def _quote_table(table):
    table = str(table).strip()
    if table.startswith('"'):
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


class EventsWriter(object):
    """PySpark foreach writer. ``EventsWriter(dsn, table)`` is the writer object."""

    def __init__(self, dsn, table="events"):
        self.dsn = dsn
        self.table = table
        self._conn = None
        self._cur = None
        self._sql = (
            "INSERT INTO {t} AS t (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, "
            "payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version"
        ).format(t=_quote_table(table))

    def __getstate__(self):
        return {"dsn": self.dsn, "table": self.table}

    def __setstate__(self, state):
        self.__init__(state["dsn"], state["table"])

    # -- lifecycle -----------------------------------------------------------
    def open(self, partition_id, epoch_id):
        self._conn = _borrow(self.dsn)
        try:
            self._cur = self._conn.cursor()
        except Exception:
            _safe_close(self._conn)
            self._conn = None
            _give_back(self.dsn, None)
            raise
        return True

    def process(self, row):
        if hasattr(row, "asDict"):
            d = row.asDict()
        elif isinstance(row, dict):
            d = row
        else:
            d = dict(zip(("id", "version", "payload"), row))
        rid = d.get("id")
        if rid is None:
            raise ValueError("events row without id: %r" % (d,))
        ver = d.get("version")
        self._cur.execute(self._sql, (rid, None if ver is None else int(ver), d.get("payload")))

    def close(self, error):
        conn, cur = self._conn, self._cur
        self._conn = self._cur = None
        if conn is None:
            return
        try:
            if cur is not None:
                cur.close()
        except Exception:
            pass
        if error is None:
            _give_back(self.dsn, conn)  # keep it for this worker's next task/epoch
        else:
            _safe_close(conn)           # discard after a failure; next task reconnects
            _give_back(self.dsn, None)
