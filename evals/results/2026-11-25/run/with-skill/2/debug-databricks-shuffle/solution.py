"""unique_counts rewritten in the shape Databricks' real-time mode accepts: two queries joined by Kafka.

    query 1 (one shuffle):  events -> dropDuplicates(["event_id"]) -> Kafka topic `events-deduped`
    query 2 (one shuffle):  topic  -> groupBy("user").count()      -> idempotent sink (upsert on user)

Databricks rejects the one-query form (``events.dropDuplicates(...).groupBy(...).count()``)
with STREAMING_REAL_TIME_MODE.SHUFFLE_MORE_THAN_ONCE: a real-time query there may
have only one streaming shuffle / stateful operator. See answer.md for the
at-least-once hop between the two queries.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

DEDUP_TOPIC = "events-deduped"


def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1: the first copy of each event_id (one stateful operator, one shuffle)."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2: unique events per user over query 1's output (one stateful operator, one shuffle).

    Returns (user, count), as the original ``groupBy("user").count()``.
    """
    return deduped.groupBy("user").count()


# -------------------------------------------------------------- how the two parts connect
def dedup_to_kafka(deduped: DataFrame) -> DataFrame:
    """Shape query 1's rows for the Kafka sink: key = event_id, value = JSON {event_id, user}."""
    return deduped.select(F.col("event_id").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def dedup_from_kafka(kafka_df: DataFrame) -> DataFrame:
    """Parse query 2's Kafka input back into (event_id, user)."""
    e = F.from_json(F.col("value").cast("string"), "event_id STRING, user STRING")
    return kafka_df.select(e.alias("e")).select("e.event_id", "e.user")


def start_dedup(events: DataFrame, bootstrap: str, checkpoint: str, topic: str = DEDUP_TOPIC) -> StreamingQuery:
    """Query 1: real-time, Kafka sink (at-least-once), its own checkpoint."""
    return (dedup_to_kafka(databricks_dedup(events)).writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())


def start_counts(spark, bootstrap: str, writer, checkpoint: str, topic: str = DEDUP_TOPIC) -> StreamingQuery:
    """Query 2: real-time, reads the topic, writes (user, count) through an idempotent foreach
    writer that upserts on ``user`` (``count`` only grows: use it as the version guard)."""
    kafka = (spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest")
             .load())
    return (databricks_counts(dedup_from_kafka(kafka)).writeStream.foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
