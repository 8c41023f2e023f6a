"""Nightly batch job: daily totals of main.sales.orders into main.sales.daily_totals (Delta).

A plain batch read/aggregate/overwrite: no streaming, no real-time mode needed for a job that
runs once a night from a Databricks job.
"""

from pyspark.sql import functions as F

SOURCE = "main.sales.orders"
TARGET = "main.sales.daily_totals"


def run(spark):
    orders = spark.read.table(SOURCE)
    daily = (orders
             .where(F.col("order_ts").isNotNull())
             .groupBy(F.to_date("order_ts").alias("order_date"))
             .agg(F.sum("amount").alias("total_amount"))
             .orderBy("order_date"))
    (daily.write
     .format("delta")
     .mode("overwrite")
     .option("overwriteSchema", "true")
     .saveAsTable(TARGET))
    return daily
