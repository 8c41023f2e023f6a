"""Distinct events per user in real-time mode: the open-source one-query shape and the
Databricks two-query shape.

Open-source Spark 4.3 runs ``dropDuplicates(["event_id"])`` feeding ``groupBy("user").count()``
in ONE real-time query (two shuffles, two stateful operators). Databricks real-time mode allows
one shuffle per query and no chained stateful operators (``SHUFFLE_MORE_THAN_ONCE`` /
``STREAMING_REAL_TIME_WATERMARK_PROPAGATION``), so there the work is split into two real-time
queries joined by a Kafka topic (see answer.md).

Every query: ``.outputMode("update")``, ``.trigger(realTime="5 minutes")``, its own checkpoint,
RocksDB state store; open-source needs Spark >= 4.3 for stateful operators in real-time mode.
Slots: source tasks + shuffle partitions per shuffle (OSS one-query shape: source + 2 x shuffle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TRIGGER = "5 minutes"
HOP_SCHEMA = StructType([StructField("event_id", StringType()), StructField("user", StringType())])


# -- open-source Spark 4.3: one real-time query ---------------------------------------
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """(user, count) of distinct event_ids; a re-sent event is dropped before counting."""
    return events.dropDuplicates(["event_id"]).groupBy("user").count()


# -- Databricks: two real-time queries joined by a Kafka topic ------------------------
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1 (one stateful operator): one row per event_id; written to a Kafka topic."""
    return events.dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2 (one stateful operator): (user, count) over the deduplicated topic."""
    return deduped.groupBy("user").count()


def start_databricks_dedup(events: DataFrame, bootstrap: str, topic: str,
                           checkpoint: str) -> StreamingQuery:
    """Query 1 into Kafka, keyed by user (one user's events stay in one partition)."""
    out = databricks_dedup(events).select(
        F.col("user").cast("string").alias("key"),
        F.to_json(F.struct(F.col("event_id").cast("string").alias("event_id"),
                           F.col("user").cast("string").alias("user"))).alias("value"))
    return (out.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=TRIGGER)
            .start())


def read_deduped(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """Query 2's source: the topic written by query 1, parsed back to (event_id, user)."""
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .load())
    return raw.select(F.from_json(F.col("value").cast("string"), HOP_SCHEMA).alias("e")).select("e.*")


def start_databricks_counts(deduped: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    """Query 2 into an idempotent foreach writer (upsert on user; the full count is written)."""
    return (databricks_counts(deduped).writeStream
            .foreach(writer)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=TRIGGER)
            .start())
