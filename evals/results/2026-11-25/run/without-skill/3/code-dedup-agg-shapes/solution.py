"""Distinct events per user in real time, where a re-sent event (same event_id) must not count twice.

Open-source Spark 4.3: ONE real-time query, dedup then count (two stateful operators, two shuffles):
    events -> dropDuplicates(event_id) -> groupBy(user).count() -> sink
Databricks: a real-time query may shuffle only once (a second stateful operator is rejected at start with
SHUFFLE_MORE_THAN_ONCE), so the same logic is TWO real-time queries chained through a Kafka topic:
    query 1: events -> dropDuplicates(event_id) -> Kafka topic (key = user)
    query 2: that topic -> groupBy(user).count() -> sink
See answer.md for the details.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

REALTIME_BATCH_DURATION = "5 minutes"
DEDUPED_SCHEMA = StructType([StructField("event_id", StringType()), StructField("user", StringType())])


# ---------------------------------------------------------------- open-source Spark 4.3: one query
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """(user, count) of distinct event_ids. Dedup state is unbounded (no watermark in real-time mode):
    every event_id ever seen is kept, so size the state store (RocksDB) accordingly."""
    return events.dropDuplicates(["event_id"]).groupBy("user").count()


# ---------------------------------------------------------------- Databricks: two chained queries
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1 body: the first occurrence of every event_id (the only stateful operator of query 1)."""
    return events.dropDuplicates(["event_id"]).select("event_id", "user")


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2 body: count per user of the already de-duplicated events (the only stateful operator of query 2).
    `deduped` is the stream read back from the intermediate topic (see from_kafka_records)."""
    return deduped.groupBy("user").count()


def to_kafka_records(deduped: DataFrame) -> DataFrame:
    """Deduped events as Kafka records; key = user keeps one user's events in one topic partition, in order."""
    return deduped.select(F.col("user").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def from_kafka_records(raw: DataFrame) -> DataFrame:
    """Parse the intermediate topic back into (event_id, user)."""
    parsed = F.from_json(F.col("value").cast("string"), DEDUPED_SCHEMA).alias("e")
    return raw.select(parsed).select("e.event_id", "e.user")


def start_databricks_dedup(events: DataFrame, bootstrap: str, topic: str, checkpoint: str) -> StreamingQuery:
    return (to_kafka_records(databricks_dedup(events)).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .queryName("events-dedup")
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())


def start_databricks_counts(spark, bootstrap: str, topic: str, writer, checkpoint: str) -> StreamingQuery:
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")   # count every deduped event ever produced
           .load())
    return (databricks_counts(from_kafka_records(raw)).writeStream
            .foreach(writer)                         # idempotent upsert of (user, count)
            .option("checkpointLocation", checkpoint)
            .queryName("unique-counts")
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
