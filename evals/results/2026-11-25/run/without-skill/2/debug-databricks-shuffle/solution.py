"""Databricks shape of `unique_counts`: one stateful operator (one shuffle) per real-time query.

Original (runs on OSS Spark 4.3, rejected on Databricks with SHUFFLE_MORE_THAN_ONCE):

    events.dropDuplicates(["event_id"]).groupBy("user").count()

Databricks real-time mode allows a single shuffle / stateful operator per query, and this plan needs
two (hash by event_id for the dedup, hash by user for the count).  Split it into two real-time
queries connected by a Kafka topic:

    query 1:  events topic  -> databricks_dedup(events)    -> to_kafka_records -> topic "unique-events"
    query 2:  "unique-events" -> parse_unique_events -> databricks_counts(deduped) -> sink

Each query has its own checkpoint, output mode "update" and trigger(realTime=...).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

UNIQUE_EVENT_SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("user", StringType()),
])


def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1: each event_id once (plain dropDuplicates; dropDuplicatesWithinWatermark is not
    supported in real-time mode).  Only shuffle: by event_id."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2: unique events per user from the already-deduplicated stream.  Only shuffle: by user."""
    return deduped.groupBy("user").count()


def to_kafka_records(deduped: DataFrame) -> DataFrame:
    """Query 1's sink rows: key = user, value = {"event_id", "user"} as JSON."""
    return deduped.select(F.col("user").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def parse_unique_events(kafka_df: DataFrame) -> DataFrame:
    """Query 2's source: parse the intermediate topic back to (event_id, user)."""
    return (kafka_df
            .select(F.from_json(F.col("value").cast("string"), UNIQUE_EVENT_SCHEMA).alias("e"))
            .select("e.event_id", "e.user"))


def start_dedup(events: DataFrame, bootstrap: str, topic: str, checkpoint: str,
                trigger: str = "5 minutes"):
    return (to_kafka_records(databricks_dedup(events)).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=trigger)
            .start())


def start_counts(spark, bootstrap: str, topic: str, writer, checkpoint: str,
                 trigger: str = "5 minutes"):
    unique = parse_unique_events(spark.readStream.format("kafka")
                                 .option("kafka.bootstrap.servers", bootstrap)
                                 .option("subscribe", topic)
                                 .load())
    return (databricks_counts(unique).writeStream
            .foreach(writer)                       # idempotent upsert of (user, count)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=trigger)
            .start())
