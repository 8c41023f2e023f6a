"""Databricks shape of `unique_counts` (evals/files/databricks_one_query.py).

The original runs dropDuplicates(event_id) and groupBy(user).count() in ONE real-time query: two stateful
operators, two shuffles (one keyed by event_id, one by user). Databricks' real-time mode allows one shuffle
per query and rejects it at start with SHUFFLE_MORE_THAN_ONCE. Split it into two real-time queries
connected by a Kafka topic (see answer.md):

    query 1: events -> databricks_dedup -> to_kafka_records -> topic "events-deduped"
    query 2: topic "events-deduped" -> from_kafka_records -> databricks_counts -> sink
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

REALTIME_BATCH_DURATION = "5 minutes"
DEDUPED_SCHEMA = StructType([StructField("event_id", StringType()), StructField("user", StringType())])


def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1: first occurrence of each event_id (its only shuffle/stateful operator; unbounded state)."""
    return events.dropDuplicates(["event_id"]).select("event_id", "user")


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2: unique events per user = count of the de-duplicated events (its only shuffle)."""
    return deduped.groupBy("user").count()


def to_kafka_records(deduped: DataFrame) -> DataFrame:
    # key = user: all of a user's events land in one partition of the intermediate topic, in order
    return deduped.select(F.col("user").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def from_kafka_records(raw: DataFrame) -> DataFrame:
    e = F.from_json(F.col("value").cast("string"), DEDUPED_SCHEMA).alias("e")
    return raw.select(e).select("e.event_id", "e.user")


def start_dedup(events: DataFrame, bootstrap: str, topic: str, checkpoint: str) -> StreamingQuery:
    return (to_kafka_records(databricks_dedup(events)).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .queryName("events-dedup")
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())


def start_counts(spark, bootstrap: str, topic: str, writer, checkpoint: str) -> StreamingQuery:
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .load())
    return (databricks_counts(from_kafka_records(raw)).writeStream
            .foreach(writer)
            .option("checkpointLocation", checkpoint)
            .queryName("unique-counts")
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
