"""(id, version, payload) from a real-time query into Postgres `events` through the pack's JVM sink.

The lowest sink latency the pack offers from Python on open-source Spark: a
compiled Java ``ForeachWriter`` (``rtm_lakebase/jvm/PostgresForeachWriter.java``)
attached through py4j by ``rtm_lakebase.jvm.start_jvm_sink_query``, so rows go
from the engine to Postgres without a Python worker (no pickling/64 KB
buffering of the Python foreach path; milliseconds instead of seconds).

Write semantics: version-guarded upsert,
``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE t.version < EXCLUDED.version``:
the newest version wins under replays (at-least-once delivery), late older
versions and out-of-order rows. Rows are buffered per key (higher version kept),
sorted by key and flushed every ``batchsize`` keys or when the oldest is
``batchinterval_ms`` old (from a timer, so rows never wait for the end of the
5-minute long batch). Lost connections are reconnected and retried; a flush
that fails for good fails the task within about a second.

Requirements
- The session must have the writer jar and the Postgres JDBC driver on
  ``spark.jars`` FROM THE START: ``session_jars()`` (= ``jvm_sink_jars()``)
  lists both for a local session; compile the jar with the pack's
  ``scripts/setup.sh`` / ``scripts/build_jvm_sink.sh`` (or ``javac`` + ``jar``,
  then ``RTM_JVM_SINK_JAR=/path/to.jar``); the driver comes from ``PG_JDBC_JAR``
  or ``/usr/share/java/postgresql.jar`` (on a cluster: the jar as a library
  and ``org.postgresql:postgresql`` via ``spark.jars.packages``).
- A classic (py4j) session: not Spark Connect, Databricks serverless or
  standard access mode (there, use the native Lakebase sink or a Python writer).
- The table: ``CREATE TABLE events (id text PRIMARY KEY, version bigint, payload text)``.
- ``dsn``: libpq DSN/URL (TCP host); the password may come from the DSN,
  ``PGPASSWORD`` or ``~/.pgpass`` on the driver and never appears in messages.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from rtm_lakebase.jvm import jvm_sink_jars, start_jvm_sink_query

TABLE = "events"


def session_jars() -> list[str]:
    """Jars to put on ``spark.jars`` when building the SparkSession (writer jar + JDBC driver)."""
    return jvm_sink_jars()


def start(df: DataFrame, dsn: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time query writing (id, version, payload) into ``events``; return it."""
    return start_jvm_sink_query(
        df.select("id", "version", "payload"),
        dsn=dsn,
        table=TABLE,
        upsertkey="id",                      # the primary key
        version_column="version",            # only a strictly newer version replaces a row
        mode="upsert",
        checkpoint_location=checkpoint,
        batchinterval_ms=10,                 # flush the tail after 10 ms (5-20 ms for lowest latency)
        batchsize=1000,
        trigger={"realTime": "5 minutes"},   # the default; a checkpoint interval, not a latency
    )
