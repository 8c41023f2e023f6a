"""Nightly batch job: main.sales.orders -> main.sales.daily_totals.

This is a plain batch job (run once a night by a Databricks job), so it uses
the batch DataFrame API - no Structured Streaming, no trigger, no checkpoint.
The whole target table is recomputed and atomically replaced (Delta
overwrite is a single transaction, readers see the old or the new version,
never a half-written table).
"""
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SOURCE_TABLE = "main.sales.orders"
TARGET_TABLE = "main.sales.daily_totals"


def daily_totals(orders: DataFrame) -> DataFrame:
    """Sum of amount per calendar day of order_ts."""
    return (
        orders.where(F.col("order_ts").isNotNull())
        .groupBy(F.to_date(F.col("order_ts")).alias("order_date"))
        .agg(F.sum("amount").alias("total_amount"))
    )


def run(spark: SparkSession) -> None:
    orders = spark.read.table(SOURCE_TABLE)
    (
        daily_totals(orders)
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .saveAsTable(TARGET_TABLE)
    )


if __name__ == "__main__":  # entry point for a Databricks Python-script task
    run(SparkSession.builder.getOrCreate())
