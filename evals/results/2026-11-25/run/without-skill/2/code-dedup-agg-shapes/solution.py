"""Unique events per user in real time: the open-source Spark 4.3 shape and the Databricks shape.

events: streaming DataFrame (event_id, user); an event may be re-sent with the same event_id.

Open-source Spark 4.3
    One real-time query: dropDuplicates(event_id) -> groupBy(user).count().
    Spark 4.3 runs every shuffle of a real-time query as a pipelined (streaming) shuffle, so the
    chain source -> dedup (shuffle by event_id) -> count (shuffle by user) is one pipelined group.
    Slots needed = source tasks + 2 x shuffle partitions.

Databricks
    Real-time mode rejects a query that shuffles more than once (SHUFFLE_MORE_THAN_ONCE), so the
    two stateful operators go into two real-time queries chained through Kafka:
        query 1: Kafka events  -> databricks_dedup  -> Kafka topic of unique events (keyed by user)
        query 2: that topic    -> databricks_counts -> sink (foreach writer / Kafka)
    Each query has exactly one stateful operator / one shuffle.

dropDuplicatesWithinWatermark is not supported in real-time mode, so plain dropDuplicates is used
(its state is unbounded: one entry per event_id ever seen).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

UNIQUE_EVENT_SCHEMA = StructType([
    StructField("event_id", StringType()),
    StructField("user", StringType()),
])


# ------------------------------------------------------------------ open-source Spark 4.3
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """One real-time query (OSS Spark 4.3): (user, count) of distinct event_ids."""
    return (events
            .select("event_id", "user")
            .dropDuplicates(["event_id"])
            .groupBy("user")
            .count())


# ------------------------------------------------------------------ Databricks: two queries
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1 (the only shuffle: by event_id): each event_id once."""
    return events.select("event_id", "user").dropDuplicates(["event_id"])


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2 (the only shuffle: by user): count of unique events per user.

    `deduped` is the stream of already-unique events (event_id, user), e.g. read back from the
    intermediate Kafka topic with parse_unique_events().
    """
    return deduped.groupBy("user").count()


# ------------------------------------------------------------------ wiring helpers (Databricks)
def to_kafka_records(deduped: DataFrame) -> DataFrame:
    """Serialize query 1's output for Kafka: key = user (keeps a user's events in one partition)."""
    return deduped.select(
        F.col("user").cast("string").alias("key"),
        F.to_json(F.struct("event_id", "user")).alias("value"),
    )


def parse_unique_events(kafka_df: DataFrame) -> DataFrame:
    """Parse the intermediate topic back into (event_id, user) for query 2."""
    return (kafka_df
            .select(F.from_json(F.col("value").cast("string"), UNIQUE_EVENT_SCHEMA).alias("e"))
            .select("e.event_id", "e.user"))


def start_databricks_pipeline(spark, bootstrap, events_topic, unique_topic, writer,
                              checkpoint_dedup, checkpoint_counts, trigger="5 minutes"):
    """Start both Databricks real-time queries (two checkpoints, chained by `unique_topic`).

    Caveat: the Kafka sink is at-least-once.  If query 1 fails after producing some unique events but
    before committing its batch, the replay re-publishes them and query 2 counts them again.  Exact
    counts across such failures need the final sink to be keyed on event_id (or a downstream dedup);
    the shapes below are exact as long as query 1 does not fail mid-batch.
    """
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", events_topic)
              .load()
              .select(F.from_json(F.col("value").cast("string"), UNIQUE_EVENT_SCHEMA).alias("e"))
              .select("e.event_id", "e.user"))
    q1 = (to_kafka_records(databricks_dedup(events)).writeStream
          .format("kafka")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("topic", unique_topic)
          .option("checkpointLocation", checkpoint_dedup)
          .outputMode("update")
          .trigger(realTime=trigger)
          .start())
    unique = parse_unique_events(
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", unique_topic)
        .load())
    q2 = (databricks_counts(unique).writeStream
          .foreach(writer)
          .option("checkpointLocation", checkpoint_counts)
          .outputMode("update")
          .trigger(realTime=trigger)
          .start())
    return q1, q2
