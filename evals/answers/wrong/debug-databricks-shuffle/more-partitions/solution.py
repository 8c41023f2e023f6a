"""Databricks shape: query 1 deduplicates into a Kafka topic, query 2 reads it and counts (one stateful operator each)."""

from pyspark.sql import functions as F


def databricks_dedup(events):
    unique = events.dropDuplicates(["event_id"])
    return unique.select(F.col("event_id").alias("key"), F.to_json(F.struct("event_id", "user")).alias("value"))


def databricks_counts(deduped):
    return deduped.groupBy("user").count()
