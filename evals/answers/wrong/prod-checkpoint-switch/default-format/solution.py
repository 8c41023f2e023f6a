"""Counts per key; the session keeps Spark's defaults apart from fewer shuffle partitions."""

from pyspark.sql import functions as F


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "2")


def counts(events):
    return events.groupBy("k").agg(F.count("*").alias("n"))
