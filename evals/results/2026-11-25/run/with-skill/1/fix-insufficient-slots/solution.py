"""Fits the clicks-per-page real-time query into 4 task slots.

A real-time query runs every task of every stage at once, so it needs
source tasks + shuffle partitions free slots. Before: 8 (one per Kafka partition)
+ 200 (spark.sql.shuffle.partitions) = 208 > 4 -> CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT.
After: 2 source tasks (Kafka ``maxPartitions`` = 2, each task reads 4 of the 8 topic
partitions) + 2 shuffle partitions = 4 slots.

Notes:
- ``maxPartitions`` is a Databricks Kafka option. Open-source Spark maps Kafka partitions to
  source tasks 1:1 (8 tasks), so on open-source Spark an 8-partition topic cannot fit 4 slots
  with an aggregation: add cores (>= 8 + shuffle partitions) there.
- The shuffle partition count is fixed by the checkpoint at the query's first run, so the
  lower value needs a NEW checkpoint location.
- 4 of 4 slots leaves no headroom (Databricks suggests ~50 % utilisation).
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2
KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": "2",
}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    """``checkpoint`` must be a new location (the old one fixes 200 shuffle partitions)."""
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
