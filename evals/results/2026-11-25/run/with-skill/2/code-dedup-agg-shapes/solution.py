"""Distinct events per user in real-time mode: the open-source one-query shape and the Databricks two-query shape.

Open-source Spark 4.3 (one real-time query, two shuffles):
    events -> dropDuplicates(["event_id"]) -> groupBy("user").count() -> idempotent sink

Databricks (one shuffle per real-time query; the chain above is rejected with
STREAMING_REAL_TIME_MODE.SHUFFLE_MORE_THAN_ONCE /
STREAMING_REAL_TIME_WATERMARK_PROPAGATION): two queries joined by a Kafka topic
    query 1: events -> dropDuplicates(["event_id"]) -> Kafka topic (key = event_id)
    query 2: topic  -> groupBy("user").count()      -> idempotent sink
The topic hop is AT-LEAST-ONCE (a replayed batch of query 1 republishes ids),
see answer.md for when that matters and the exact alternative.

All real-time queries: ``outputMode("update")``, ``trigger(realTime="5 minutes")``
(the checkpoint interval, not a latency), a sink keyed on ``user`` (upsert; the
count only grows, so it can be the version guard).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


# ---------------------------------------------------------------- open-source Spark 4.3
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """(user, count): distinct event_ids per user, one real-time query (open-source Spark 4.3+).

    Two stateful operators, two streaming shuffles: needs
    source tasks + 2 x spark.sql.shuffle.partitions free task slots.
    ``dropDuplicates`` keeps every event_id ever seen (unbounded state); see
    answer.md for bounding it.
    """
    return (events.dropDuplicates(["event_id"])
            .groupBy("user")
            .agg(F.count(F.lit(1)).alias("count")))


# ---------------------------------------------------------------- Databricks
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1 on Databricks: the first copy of each event_id (one shuffle). Columns event_id, user."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2 on Databricks: (user, count) over the deduplicated events (one shuffle).

    ``deduped`` has ``event_id`` and ``user`` (e.g. parsed from the topic query 1
    writes, see :func:`from_dedup_topic`). Counts a replayed id again: see answer.md.
    """
    return deduped.groupBy("user").agg(F.count(F.lit(1)).alias("count"))


# ---------------------------------------------------------------- wiring (Kafka in between)
def to_dedup_topic(deduped: DataFrame) -> DataFrame:
    """Query 1's output shaped for the Kafka sink: key = event_id, value = JSON {event_id, user}."""
    return deduped.select(F.col("event_id").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def from_dedup_topic(kafka_df: DataFrame) -> DataFrame:
    """Query 2's input: the Kafka records of the dedup topic parsed back to (event_id, user)."""
    parsed = F.from_json(F.col("value").cast("string"), "event_id STRING, user STRING")
    return kafka_df.select(parsed.alias("e")).select("e.event_id", "e.user")


def start_databricks_dedup(events: DataFrame, bootstrap: str, topic: str, checkpoint: str) -> StreamingQuery:
    return (to_dedup_topic(databricks_dedup(events)).writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())


def start_databricks_counts(spark, bootstrap: str, topic: str, writer, checkpoint: str) -> StreamingQuery:
    """``writer``: an idempotent foreach writer upserting on ``user`` (version guard on ``count``)."""
    kafka = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest")
             .load())
    return (databricks_counts(from_dedup_topic(kafka)).writeStream.foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
