"""Nightly batch job: daily sales totals.

This is a once-a-night batch job, so it is written as a plain batch read/aggregate/overwrite.
No Structured Streaming (and certainly no real-time mode) is needed: there is no latency goal,
and a streaming query would only add a checkpoint and an always-on cluster for no benefit.

Reads   main.sales.orders        (order_ts timestamp, amount numeric)
Writes  main.sales.daily_totals  (day date, total_amount) -- fully overwritten each run.
"""

from pyspark.sql import functions as F

SOURCE_TABLE = "main.sales.orders"
TARGET_TABLE = "main.sales.daily_totals"


def daily_totals(orders):
    """Sum of amount per calendar day of order_ts (rows with a null order_ts are skipped)."""
    return (orders
            .where(F.col("order_ts").isNotNull())
            .groupBy(F.to_date("order_ts").alias("day"))
            .agg(F.sum("amount").alias("total_amount")))


def run(spark):
    """Entry point for the Databricks job task."""
    totals = daily_totals(spark.read.table(SOURCE_TABLE))
    (totals.write
     .format("delta")
     .mode("overwrite")                    # replace the whole table atomically (one Delta commit)
     .option("overwriteSchema", "true")    # first run / schema changes do not fail the job
     .saveAsTable(TARGET_TABLE))
    return totals
