"""Nightly batch job: daily order totals from `main.sales.orders` into `main.sales.daily_totals`.

This is a plain batch job run once a night by a Databricks job: no streaming,
no trigger, no real-time mode and no Postgres sink are involved (the
spark-rtm-lakebase skill does not apply; a scheduled batch is the cheapest way
to get daily freshness). It reads the Delta table, sums `amount` per calendar
day of `order_ts` and replaces the target table's contents atomically (a Delta
overwrite is one transaction, so readers see either the old or the new totals).

The calendar day is taken in the session time zone (`spark.sql.session.timeZone`);
set it explicitly in the job (e.g. "UTC") if `order_ts` is a TIMESTAMP and the
day boundary matters.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SOURCE_TABLE = "main.sales.orders"
TARGET_TABLE = "main.sales.daily_totals"


def daily_totals(orders: DataFrame) -> DataFrame:
    """One row per calendar day: ``order_date`` and ``total_amount`` (sum of ``amount``)."""
    return (orders
            .where(F.col("order_ts").isNotNull())
            .groupBy(F.to_date("order_ts").alias("order_date"))
            .agg(F.sum("amount").alias("total_amount"))
            .orderBy("order_date"))


def run(spark: SparkSession) -> None:
    """Recompute every day's total and overwrite `main.sales.daily_totals` (Delta)."""
    totals = daily_totals(spark.read.table(SOURCE_TABLE))
    # Delta is the default table format on Databricks; the overwrite replaces the
    # table's rows in one transaction (overwriteSchema lets the schema follow the query).
    (totals.write
     .mode("overwrite")
     .option("overwriteSchema", "true")
     .saveAsTable(TARGET_TABLE))


if __name__ == "__main__":  # entry point for a Databricks Python script / wheel task
    run(SparkSession.builder.getOrCreate())
