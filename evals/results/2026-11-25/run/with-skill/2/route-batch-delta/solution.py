"""Nightly batch job: main.sales.orders -> per-day totals -> main.sales.daily_totals (overwrite).

This is a plain batch job, not a streaming one: it runs once a night from a
Databricks job and rewrites the whole result, so Structured Streaming (and
certainly real-time mode, which holds cluster slots around the clock and does
not read Delta sources) would add cost and nothing else. A batch read, a
groupBy and an overwrite of the Delta table is all it needs; run it on job
compute (serverless or a small classic job cluster).

The calendar day is taken in the session time zone (``spark.sql.session.timeZone``),
which on Databricks defaults to UTC; set it on the job if the business day is
in another zone (see ``run(spark, time_zone=...)``).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SOURCE_TABLE = "main.sales.orders"
TARGET_TABLE = "main.sales.daily_totals"


def daily_totals(orders: DataFrame) -> DataFrame:
    """One row per calendar day of ``order_ts``: ``order_date`` and ``total_amount``.

    Orders with a NULL ``order_ts`` have no day and are left out; NULL amounts
    are ignored by ``sum`` as in SQL.
    """
    return (
        orders.where(F.col("order_ts").isNotNull())
        .groupBy(F.to_date("order_ts").alias("order_date"))
        .agg(F.sum("amount").alias("total_amount"))
    )


def run(spark: SparkSession, time_zone: str | None = None) -> None:
    """Recompute every day's total and overwrite ``main.sales.daily_totals``.

    The overwrite is one Delta transaction: readers see either the old table or
    the new one, never a half-written one, and a failed run leaves the old
    table in place, so re-running the job is safe (idempotent).
    """
    if time_zone:
        spark.conf.set("spark.sql.session.timeZone", time_zone)
    result = daily_totals(spark.read.table(SOURCE_TABLE))
    (
        result.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")  # the table's schema always equals this job's output
        .saveAsTable(TARGET_TABLE)
    )


if __name__ == "__main__":  # Databricks Python script task / spark-submit entry point
    run(SparkSession.builder.getOrCreate())
