"""Foreach writer for ``events`` that stays within a fixed connection budget.

    from solution import EventsWriter
    (df.writeStream
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ...)
       .start())

Table: events(id text primary key, version bigint, payload text); newest version wins.

Connection discipline (budget = 6 connections, 6 concurrent sink tasks):

* A connection belongs to exactly one (partition, epoch) invocation of the
  writer: it is opened lazily on the first write of that invocation and is
  closed in ``close()`` -- always, in a ``finally``, whether the epoch
  succeeded or failed.  Nothing is cached in module globals, in the Python
  worker, or in a pool, so an idle Python worker (between epochs, or a spare
  worker Spark keeps around) holds *no* connection, and the number of open
  connections is at most the number of sink tasks running right now
  (<= 6), across any number of epochs.
* An epoch/partition with no rows opens no connection at all.
* If ``open()`` is called again on the same instance without a ``close()``
  (defensive), the previous connection is closed first, so one instance can
  never hold two connections.
* Connection attempts use a connect timeout and an application_name so the
  sink's sessions are easy to see in pg_stat_activity.

Writes: rows are buffered per partition/epoch, reduced to the newest version
per id, and upserted in one transaction with
``ON CONFLICT (id) DO UPDATE ... WHERE excluded.version > events.version`` so an
older (or replayed) version never overwrites a newer one.  Works with psycopg2
(preferred) or psycopg 3.
"""

_CHUNK = 1000


def _get(row, name):
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


def _quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def _quote_table(table):
    if '"' in table:
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


def _connect(dsn):
    kwargs = {"connect_timeout": 10, "application_name": "spark-events-sink"}
    try:
        import psycopg2

        conn = psycopg2.connect(dsn, **kwargs)
        conn.autocommit = False
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=False, **kwargs)


def _newer(a, b):
    """True if version a should replace version b (None counts as oldest)."""
    if a is None:
        return False
    if b is None:
        return True
    return a > b


class EventsWriter(object):
    """PySpark foreach writer object (open / process / close)."""

    def __init__(self, dsn, table="events"):
        self.dsn = dsn
        self.table = table
        t = _quote_table(table)
        self._tpl = "(%s, %s::bigint, %s)"
        self._head = "INSERT INTO {t} AS tgt (id, version, payload) VALUES ".format(t=t)
        self._tail = (
            " ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload"
            " WHERE EXCLUDED.version IS NOT NULL"
            " AND (tgt.version IS NULL OR EXCLUDED.version > tgt.version)"
        )
        self._conn = None
        self._buf = None

    # -- Spark API ---------------------------------------------------------

    def open(self, partition_id, epoch_id):
        self._close_conn()  # defensive: never two connections per instance
        self._buf = {}
        return True

    def process(self, row):
        rid = _get(row, "id")
        version = _get(row, "version")
        version = None if version is None else int(version)
        payload = _get(row, "payload")
        cur = self._buf.get(rid)
        # keep the newest version per id (first arrival wins on ties, like the SQL)
        if cur is None or _newer(version, cur[1]):
            self._buf[rid] = (rid, version, payload)

    def close(self, error):
        try:
            if error is None and self._buf:
                self._flush()
        finally:
            self._buf = None
            self._close_conn()  # always give the connection back

    # -- internals ---------------------------------------------------------

    def _flush(self):
        rows = [self._buf[k] for k in sorted(self._buf, key=lambda x: (x is None, x))]
        if self._conn is None:
            self._conn = _connect(self.dsn)
        conn = self._conn
        try:
            with conn.cursor() as cur:
                for i in range(0, len(rows), _CHUNK):
                    chunk = rows[i:i + _CHUNK]
                    sql = self._head + ", ".join([self._tpl] * len(chunk)) + self._tail
                    cur.execute(sql, [v for r in chunk for v in r])
            conn.commit()
        except Exception:
            try:
                conn.rollback()
            except Exception:
                pass
            raise
        self._buf = {}

    def _close_conn(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def __getstate__(self):
        # never ship a live connection inside the pickled writer
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_buf"] = None
        return state


def make_writer(dsn, table="events"):
    return EventsWriter(dsn, table)
