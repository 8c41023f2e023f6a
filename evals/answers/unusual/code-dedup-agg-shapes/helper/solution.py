"""Dedup in a helper with a filter before it (the issue's case); the count query under another local name."""

from pyspark.sql import DataFrame, functions as F


def _drop_resent(events: DataFrame) -> DataFrame:
    return events.where(F.col("event_id").isNotNull()).dropDuplicates(["event_id"])


def oss_unique_counts(events: DataFrame) -> DataFrame:
    per_user = _drop_resent(events).groupBy("user")
    return per_user.agg(F.count(F.lit(1)).alias("unique_events"))


def databricks_dedup(events: DataFrame) -> DataFrame:
    return _drop_resent(events)


def databricks_counts(deduped: DataFrame) -> DataFrame:
    keys = ["user"]
    return deduped.groupBy(*keys).count()
