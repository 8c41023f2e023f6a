"""Real-time-mode (open-source Spark 4.3) query: stream -> Postgres ``events`` with p99 < 1.5 s.

    from solution import start
    q = start(df, "host=... dbname=... user=...", "events", "/path/to/checkpoint")

Latency budget and the two things that would blow it
----------------------------------------------------
1. **Committing at close().**  In real-time mode a batch is long-running (here
   5 minutes); ``open``/``close`` of a ForeachWriter happen once per partition
   per batch.  A writer that buffers and commits in ``close()`` would make every
   row wait up to the batch duration.  This writer therefore writes and commits
   **each row in process()** (autocommit, one upsert per row; ~100 rows/s is
   trivial for Postgres).

2. **PySpark's JVM->Python row batching.**  A Python ForeachWriter runs inside
   ``PythonForeachWriter`` on the JVM, which ships rows to the Python worker
   through ``SerDeUtil.AutoBatchedPickler``.  That pickler starts with batches
   of 1 row and *doubles* the batch size every time a pickled batch is smaller
   than 1 MiB, and it blocks until the batch is full.  With small rows at
   ~100 rows/s the batch quickly reaches hundreds/thousands of rows, i.e.
   seconds to minutes before Python even sees a row.  The pickler leaves the
   batch size unchanged when a batch pickles to between 1 MiB and 10 MiB, so
   each row carries a constant ~1.05 MB padding column (a folded literal,
   dropped again in Python).  Each row is then pickled and handed to Python on
   its own, immediately.  Cost: roughly 1 MB of local JVM->Python copy per row
   (about 100 MB/s at this rate). That is cheap compared with the SLO, and it
   keeps the query on operators and sinks that real-time mode supports
   (projection + foreach sink; no allowlist override).

Other choices:
* ``outputMode("update")`` + ``trigger(realTime="5 minutes")``: long batches
  mean few batch boundaries (each boundary is a short processing gap).
* Upsert on ``id`` (INSERT ... ON CONFLICT (id) DO UPDATE) so replays after a
  failure are idempotent; columns not written keep their defaults.
* The Postgres connection is opened eagerly in ``open()`` (not on the first
  row) so the first row of a batch does not pay the connect latency, reused
  for every row of the partition's batch, and closed in ``close()``.
* psycopg2 if installed, else psycopg 3.
"""

from pyspark.sql import functions as F

# Must make one pickled row >= 1 MiB (1,048,576 bytes) and stay well below the
# 10 MiB shrink threshold of AutoBatchedPickler.
PAD_CHARS = 1_100_000
_PAD_COL = "__rtm_pickle_pad"


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=True)


def _quote_table(table):
    if '"' in table:
        return table
    return ".".join('"' + p.replace('"', '""') + '"' for p in table.split("."))


class _EventsRowWriter(object):
    """Foreach writer: one autocommitted upsert per row."""

    def __init__(self, dsn, table):
        self.dsn = dsn
        self.table = table
        self.sql = (
            "INSERT INTO {t} (id, sent_ms, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET sent_ms = EXCLUDED.sent_ms, "
            "payload = EXCLUDED.payload"
        ).format(t=_quote_table(table))
        self.conn = None
        self.cur = None

    def open(self, partition_id, epoch_id):
        self.conn = _connect(self.dsn)
        self.cur = self.conn.cursor()
        return True

    def _execute(self, params):
        try:
            self.cur.execute(self.sql, params)
        except Exception:
            # one reconnect for a dropped connection; anything else is raised
            if self.conn is not None and not getattr(self.conn, "closed", False):
                raise
            self.conn = _connect(self.dsn)
            self.cur = self.conn.cursor()
            self.cur.execute(self.sql, params)

    def process(self, row):
        rid = row["id"]
        sent = row["sent_ms"]
        self._execute((
            None if rid is None else int(rid),
            None if sent is None else int(sent),
            row["payload"],
        ))  # autocommit: visible to readers as soon as this returns

    def close(self, error):
        try:
            if self.cur is not None:
                self.cur.close()
        except Exception:
            pass
        try:
            if self.conn is not None:
                self.conn.close()
        except Exception:
            pass
        self.cur = None
        self.conn = None


def start(df, dsn, table, checkpoint):
    """Start the real-time query writing ``df`` (id, sent_ms, payload) into ``table``."""
    out = df.select(
        F.col("id").cast("long").alias("id"),
        F.col("sent_ms").cast("long").alias("sent_ms"),
        F.col("payload").cast("string").alias("payload"),
        # constant padding, see module docstring (keeps the JVM->Python batch at 1 row)
        F.expr("repeat('x', {n})".format(n=int(PAD_CHARS))).alias(_PAD_COL),
    )
    return (
        out.writeStream
        .queryName("events_rtm_to_postgres")
        .foreach(_EventsRowWriter(dsn, table))
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime="5 minutes")
        .start()
    )
