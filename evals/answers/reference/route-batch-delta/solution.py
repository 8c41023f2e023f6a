"""Nightly batch: daily order totals from Delta into Delta."""

from pyspark.sql import functions as F


def run(spark):
    orders = spark.read.table("main.sales.orders")
    daily = orders.groupBy(F.to_date("order_ts").alias("day")).agg(F.sum("amount").alias("total"))
    daily.write.format("delta").mode("overwrite").saveAsTable("main.sales.daily_totals")
