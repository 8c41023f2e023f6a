"""Daily totals as a stream (wrong for a nightly batch job)."""

from pyspark.sql import functions as F


def run(spark):
    orders = spark.readStream.table("main.sales.orders")
    daily = orders.groupBy(F.to_date("order_ts").alias("day")).agg(F.sum("amount").alias("total"))
    (daily.writeStream.outputMode("complete").option("checkpointLocation", "/tmp/cp")
     .trigger(availableNow=True).toTable("main.sales.daily_totals"))
