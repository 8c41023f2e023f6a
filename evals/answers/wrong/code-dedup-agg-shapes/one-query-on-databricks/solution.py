"""Distinct events per user: one query on open-source Spark 4.3, two queries chained through Kafka on Databricks."""

from pyspark.sql import DataFrame, functions as F


def oss_unique_counts(events: DataFrame) -> DataFrame:
    # Open-source 4.3 runs a deduplication feeding an aggregation in one real-time query.
    return events.dropDuplicates(["event_id"]).groupBy("user").count()


def databricks_dedup(events: DataFrame) -> DataFrame:
    # Query 1 on Databricks: only the deduplication; its output goes to a Kafka topic.
    unique = events.dropDuplicates(["event_id"])
    return unique.select(F.col("user").alias("key"), F.to_json(F.struct("event_id", "user")).alias("value"))


def databricks_counts(deduped: DataFrame) -> DataFrame:
    # Query 2 on Databricks: reads the deduplicated topic (parsed into event_id, user) and counts.
    return deduped.dropDuplicates(["event_id"]).groupBy("user").count()
