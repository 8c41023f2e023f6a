"""clicks-per-page, fixed to fit a 4-slot cluster in real-time mode.

Why it failed: a real-time query runs every task of every stage at once, so it needs
source tasks + shuffle partitions free slots: 8 (one task per partition of `clicks`)
+ 6 (spark.sql.shuffle.partitions for the groupBy) = 14 > 4
-> CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT.

Fix: 2 source tasks (Kafka ``maxPartitions`` = 2, each task reads 4 topic partitions)
+ 2 shuffle partitions = 4 slots.

Notes
- ``maxPartitions`` is a Databricks Kafka option; open-source Spark maps Kafka partitions
  to source tasks 1:1, so there an 8-partition topic needs >= 8 + shuffle slots (add cores
  instead).
- The checkpoint fixes the shuffle partition count at the query's first run: lowering it
  to 2 needs a NEW checkpoint location (pass a fresh ``checkpoint``).
- 4 of 4 slots is no headroom (Databricks suggests ~50 % utilisation; a lost executor's
  task cannot be rescheduled at once). Add cores when you can.
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2
KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": "2",          # 8 topic partitions -> 2 source tasks (4 partitions each)
    "failOnDataLoss": "true",
}
AVAILABLE_SLOTS = 4
REQUIRED_SLOTS = int(KAFKA_OPTIONS["maxPartitions"]) + SHUFFLE_PARTITIONS  # 4


def configure(spark):
    """Set the shuffle partitions before the query's first run (fixed by its checkpoint)."""
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    """Start the real-time query; ``checkpoint`` must be a new location (see module doc)."""
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream
            .queryName("clicks-per-page")
            .foreach(writer)               # must be idempotent: upsert on page (at-least-once)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
