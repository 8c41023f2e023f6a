"""Distinct events per user in real time; re-sent events must not count twice.

Two shapes (see answer.md for the why):

* Open-source Spark 4.3 - one real-time query, two stateful operators:
      events -> dropDuplicates(event_id) -> groupBy(user).count() -> sink
* Databricks - real-time mode rejects chaining stateful operators in one
  query, so the work is split into two real-time queries joined by a Kafka
  topic:
      query 1: events -> dropDuplicates(event_id) -> Kafka topic "events-deduped"
      query 2: Kafka "events-deduped" -> groupBy(user).count() -> sink

Output mode is `update` everywhere (the only one real-time mode accepts).
"""
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

REAL_TIME_BATCH_DURATION = "5 minutes"

DEDUPED_SCHEMA = StructType(
    [StructField("event_id", StringType()), StructField("user", StringType())]
)


# --------------------------------------------------------------- OSS Spark 4.3
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """One query: dedup on event_id, then count per user -> (user, count)."""
    return (
        events.select("event_id", "user")
        .dropDuplicates(["event_id"])  # a re-sent event_id is dropped (state is unbounded)
        .groupBy("user")
        .count()
    )


# ------------------------------------------------------------------ Databricks
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1: the only stateful operator is the deduplication.

    Returns (event_id, user); write it to an intermediate Kafka topic (see
    to_kafka_records / start_databricks_dedup)."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2: the only stateful operator is the aggregation -> (user, count).

    `deduped` is the stream of already-deduplicated events (event_id, user),
    e.g. parsed back from the intermediate topic with parse_kafka_records."""
    return deduped.groupBy("user").count()


# ----------------------------------------------------- wiring helpers (Kafka)
def to_kafka_records(deduped: DataFrame) -> DataFrame:
    """(event_id, user) -> Kafka (key=event_id, value=JSON)."""
    return deduped.select(
        F.col("event_id").cast("string").alias("key"),
        F.to_json(F.struct("event_id", "user")).alias("value"),
    )


def parse_kafka_records(raw: DataFrame) -> DataFrame:
    """Kafka records written by to_kafka_records -> (event_id, user)."""
    return raw.select(
        F.from_json(F.col("value").cast("string"), DEDUPED_SCHEMA).alias("e")
    ).select("e.event_id", "e.user")


def start_oss(events, writer, checkpoint):
    return (
        oss_unique_counts(events)
        .writeStream.foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )


def start_databricks_dedup(events, bootstrap, topic, checkpoint):
    return (
        to_kafka_records(databricks_dedup(events))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )


def start_databricks_counts(spark, bootstrap, topic, writer, checkpoint):
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    return (
        databricks_counts(parse_kafka_records(raw))
        .writeStream.foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )
