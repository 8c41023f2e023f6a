"""Stream (id, version, payload) rows of a real-time query into Postgres table ``events``
through the pack's JVM foreach writer (rows never leave the JVM, so no Python-worker delay).

Requirements (checked by ``start_jvm_sink_query`` before the query starts; it raises
``JvmSinkUnavailable`` naming what is missing):
- the SparkSession was created with the writer jar and the Postgres JDBC driver on
  ``spark.jars``; locally::

      from rtm_lakebase.jvm import jvm_sink_jars
      spark = (SparkSession.builder
               .config("spark.jars", ",".join(jvm_sink_jars()))
               .getOrCreate())

  on a cluster: the jar as a library plus ``org.postgresql:postgresql:42.7.13``;
- a classic (py4j) session: not Spark Connect, not Databricks serverless/standard access mode;
- ``events`` exists with primary key ``id`` and columns ``version`` and ``payload``.

Delivery is at-least-once; the version guard (``ON CONFLICT (id) DO UPDATE ... WHERE
events.version < EXCLUDED.version``) makes replays harmless: only a strictly newer
version replaces a row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rtm_lakebase.jvm import start_jvm_sink_query

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

TABLE = "events"
KEY = "id"
VERSION = "version"
# Flush when the oldest buffered row is this old (the pack recommends 5-20 ms for
# the lowest latency; the native sink's default is 100 ms).
BATCH_INTERVAL_MS = 10


def start(df: DataFrame, dsn: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time query writing ``df`` (id, version, payload) into ``events``."""
    return start_jvm_sink_query(
        df.select("id", "version", "payload"),
        dsn=dsn,
        table=TABLE,
        upsertkey=KEY,
        mode="upsert",
        version_column=VERSION,        # newest version wins; older/equal replays are ignored
        batchinterval_ms=BATCH_INTERVAL_MS,
        checkpoint_location=checkpoint,
        trigger={"realTime": "5 minutes"},  # checkpoint interval, not a latency target
        output_mode="update",          # the only output mode real-time mode accepts
    )
