"""Bulk-speed foreach writer for ``events`` (newest version wins).

    from solution import EventsWriter
    (df.writeStream
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ...)
       .start())

Table: events(id text primary key, version bigint, payload text)

How it reaches bulk-load speed instead of row-at-a-time:

* ``process()`` only appends to an in-memory dict (newest version per id);
  no network I/O per row.
* At ``close()`` (end of the partition's epoch) -- or every ``flush_rows``
  rows for very large epochs -- the buffer is streamed with ``COPY ... FROM
  STDIN`` into a session temp staging table, then merged with ONE set-based
  statement::

      INSERT INTO events (id, version, payload)
      SELECT id, version, payload FROM stage ORDER BY id
      ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
      WHERE EXCLUDED.version IS NOT NULL
        AND (events.version IS NULL OR EXCLUDED.version > events.version);

  So 30,000 rows cost one COPY stream + one INSERT ... SELECT + one commit
  (a few round trips), i.e. the same order as a bulk load.
* Ids are merged in sorted order so concurrent tasks touching overlapping ids
  take row locks in the same order (no deadlocks).
* Stale or replayed versions never overwrite newer ones (idempotent replays).
* The connection is opened lazily and closed in ``close()``, so idle workers
  hold nothing between epochs.

Works with psycopg2 (``copy_expert``) or psycopg 3 (``cursor.copy``).
"""

import io as _io


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


def _copy_text(v):
    """Encode one value for COPY text format."""
    if v is None:
        return "\\N"
    s = str(v)
    if "\\" in s:
        s = s.replace("\\", "\\\\")
    if "\t" in s or "\n" in s or "\r" in s:
        s = s.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return s


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn, application_name="spark-events-bulk-sink")
        conn.autocommit = False
        return conn, "psycopg2"
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=False,
                               application_name="spark-events-bulk-sink"), "psycopg"


class EventsWriter(object):
    """PySpark foreach writer object (open / process / close)."""

    _STAGE = "_events_stage"

    def __init__(self, dsn, table="events", flush_rows=100000):
        self.dsn = dsn
        self.table = table
        self.flush_rows = int(flush_rows)
        self._conn = None
        self._driver = None
        self._buf = None
        t = _quote_table(table)
        self._merge_sql = (
            "INSERT INTO {t} AS tgt (id, version, payload) "
            "SELECT id, version, payload FROM {s} ORDER BY id "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE EXCLUDED.version IS NOT NULL "
            "AND (tgt.version IS NULL OR EXCLUDED.version > tgt.version)"
        ).format(t=t, s=self._STAGE)

    # -- Spark API ---------------------------------------------------------

    def open(self, partition_id, epoch_id):
        self._close_conn()
        self._buf = {}
        return True

    def process(self, row):
        rid = _get(row, "id")
        version = _get(row, "version")
        version = None if version is None else int(version)
        cur = self._buf.get(rid)
        if cur is None or (version is not None and (cur[1] is None or version > cur[1])):
            self._buf[rid] = (rid, version, _get(row, "payload"))
            if len(self._buf) >= self.flush_rows:
                self._flush()

    def close(self, error):
        try:
            if error is None and self._buf:
                self._flush()
        finally:
            self._buf = None
            self._close_conn()

    # -- internals ---------------------------------------------------------

    def _flush(self):
        rows = list(self._buf.values())
        if not rows:
            return
        if self._conn is None:
            self._conn, self._driver = _connect(self.dsn)
        conn = self._conn
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "CREATE TEMP TABLE IF NOT EXISTS {s} "
                    "(id text, version bigint, payload text) ON COMMIT DELETE ROWS".format(s=self._STAGE)
                )
                copy_sql = "COPY {s} (id, version, payload) FROM STDIN".format(s=self._STAGE)
                if self._driver == "psycopg2":
                    buf = _io.StringIO()
                    w = buf.write
                    for rid, ver, payload in rows:
                        w(_copy_text(rid))
                        w("\t")
                        w("\\N" if ver is None else str(ver))
                        w("\t")
                        w(_copy_text(payload))
                        w("\n")
                    buf.seek(0)
                    cur.copy_expert(copy_sql, buf)
                else:
                    with cur.copy(copy_sql) as cp:
                        for r in rows:
                            cp.write_row(r)
                cur.execute(self._merge_sql)
            conn.commit()  # ON COMMIT DELETE ROWS empties the stage
        except Exception:
            try:
                conn.rollback()
            except Exception:
                pass
            self._close_conn()
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
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_buf"] = None
        return state


def make_writer(dsn, table="events"):
    return EventsWriter(dsn, table)
