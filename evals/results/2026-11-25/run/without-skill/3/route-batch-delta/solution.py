"""Nightly batch job: daily totals of main.sales.orders -> main.sales.daily_totals (Delta, overwrite).

This is a once-a-night job, so it is a plain batch read + aggregate + overwrite. No Structured Streaming,
no real-time mode: there is no latency requirement, Delta is not a real-time-mode source or sink anyway,
and a full recompute keeps the result exactly consistent with the source (late/updated orders included).

Calendar day = to_date(order_ts) in the session time zone (spark.sql.session.timeZone). Set that time
zone in the job configuration if the business day is not the cluster's default (UTC on Databricks).
"""

from pyspark.sql import functions as F

SOURCE_TABLE = "main.sales.orders"
TARGET_TABLE = "main.sales.daily_totals"


def daily_totals(orders):
    """Sum of amount per calendar day of order_ts (orders without a timestamp are not attributable)."""
    return (orders
            .where(F.col("order_ts").isNotNull())
            .groupBy(F.to_date("order_ts").alias("order_date"))
            .agg(F.sum("amount").alias("total_amount")))


def run(spark):
    totals = daily_totals(spark.read.table(SOURCE_TABLE))
    (totals.write
     .format("delta")
     .mode("overwrite")                    # atomic replace of the whole table: one new Delta version
     .option("overwriteSchema", "true")    # first run / column type change does not fail the job
     .saveAsTable(TARGET_TABLE))
