"""Unique events per user on Databricks real-time mode: two queries.

The one-query version

    events.dropDuplicates(["event_id"]).groupBy("user").count()

has two stateful operators, each behind its own shuffle (by event_id, then
by user). Open-source Spark 4.3 pipelines both shuffles in one real-time
query; Databricks real-time mode rejects it at start (SHUFFLE_MORE_THAN_ONCE:
only one shuffle / stateful operator per real-time query). So it is split:

  query 1  events --dropDuplicates(event_id)--> Kafka topic (key=event_id, JSON value)
  query 2  Kafka topic --parse--> groupBy(user).count() --> sink

Each query has exactly one shuffle and one stateful operator, its own
checkpoint, outputMode("update") and trigger(realTime=...).
"""
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

REAL_TIME_BATCH_DURATION = "5 minutes"
DEDUPED_SCHEMA = StructType(
    [StructField("event_id", StringType()), StructField("user", StringType())]
)


def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1 logic: drop re-sent events (one shuffle, by event_id)."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2 logic: count per user over already-deduplicated events (one shuffle, by user)."""
    return deduped.groupBy("user").count()


# ---------------------------------------------------------------- wiring
def start_dedup(events, bootstrap, topic, checkpoint):
    """Query 1: deduplicated events -> intermediate Kafka topic."""
    out = databricks_dedup(events).select(
        F.col("event_id").cast("string").alias("key"),
        F.to_json(F.struct("event_id", "user")).alias("value"),
    )
    return (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )


def read_deduped(spark, bootstrap, topic) -> DataFrame:
    """Intermediate topic -> (event_id, user) stream for query 2."""
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    return raw.select(
        F.from_json(F.col("value").cast("string"), DEDUPED_SCHEMA).alias("e")
    ).select("e.event_id", "e.user")


def start_counts(spark, bootstrap, topic, writer, checkpoint):
    """Query 2: counts per user -> foreach writer (upsert by user)."""
    return (
        databricks_counts(read_deduped(spark, bootstrap, topic))
        .writeStream.foreach(writer)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )
