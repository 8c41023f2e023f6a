"""Unique events per user, in the shape Databricks real-time mode accepts: two queries.

Databricks refuses a real-time query whose plan has more than one streaming shuffle
(``STREAMING_REAL_TIME_MODE.SHUFFLE_MORE_THAN_ONCE``); ``dropDuplicates`` feeding
``groupBy().count()`` has two (and chains two stateful operators). So:

1. query 1 (:func:`databricks_dedup`): ``dropDuplicates(["event_id"])`` -- one shuffle --
   written to a Kafka topic with the Kafka sink (:func:`start_dedup_query`);
2. query 2 (:func:`databricks_counts`): reads that topic (:func:`read_deduped`) and
   ``groupBy("user").count()`` -- one shuffle -- written with an idempotent upsert on ``user``.

The Kafka hop is at-least-once: if query 1 fails after publishing and before committing
its long batch, it republishes those event ids on restart and query 2 would count them
twice. Databricks refuses a second ``dropDuplicates`` in query 2 (it would be a second
shuffle again), so when exact counts matter, let the sink deduplicate instead: write
query 2's input to Postgres with insert-if-absent on ``event_id`` and count in SQL
(see answer.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TRIGGER = "5 minutes"  # checkpoint interval of each real-time query, not a latency target

# Columns the hop carries; extend with the other event columns you need downstream.
HOP_SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("user", StringType()),
])


# -- query 1: deduplicate (one stateful operator, one shuffle) --------------------------
def databricks_dedup(events: DataFrame) -> DataFrame:
    """First real-time query's transformation: one row per ``event_id``."""
    return events.dropDuplicates(["event_id"])


def start_dedup_query(events: DataFrame, bootstrap_servers: str, topic: str,
                      checkpoint: str) -> StreamingQuery:
    """Query 1: deduplicated events into Kafka ``topic`` (keyed by user, so one user's
    events stay in one partition)."""
    deduped = databricks_dedup(events)
    record = deduped.select(
        F.col("user").cast("string").alias("key"),
        F.to_json(F.struct(*[F.col(f.name) for f in HOP_SCHEMA.fields])).alias("value"),
    )
    return (record.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=TRIGGER)
            .start())


# -- query 2: aggregate (one stateful operator, one shuffle) ---------------------------
def read_deduped(spark: SparkSession, bootstrap_servers: str, topic: str) -> DataFrame:
    """Query 2's source: the topic query 1 writes, parsed back into columns."""
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap_servers)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .option("failOnDataLoss", "true")
           .load())
    return (raw.select(F.from_json(F.col("value").cast("string"), HOP_SCHEMA).alias("e"))
            .select("e.*"))


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Second real-time query's transformation: unique events per user."""
    return deduped.groupBy("user").count()


def start_counts_query(deduped: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    """Query 2: counts through an idempotent foreach writer (upsert on ``user``;
    each update carries the full running count, so a replayed update is harmless)."""
    return (databricks_counts(deduped).writeStream
            .foreach(writer)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=TRIGGER)
            .start())
