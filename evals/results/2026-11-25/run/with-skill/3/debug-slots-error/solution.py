"""clicks-per-page in real-time mode on a 4-slot cluster.

The error: CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT. A real-time query runs every
task of every stage at once for the whole long batch, so it needs

    source tasks + shuffle partitions = 8 (one per Kafka partition of `clicks`) + 6 = 14 task slots

and the cluster has 4. Fix: bring the sum down to 4.

- ``maxPartitions = 2``: the Kafka source reads the 8 topic partitions with 2
  tasks (4 partitions each). This is a Databricks Kafka option (Databricks
  recommends it for sizing real-time queries). Open-source Spark maps Kafka
  partitions to tasks 1:1 and has no such knob: there this query needs at
  least 8 + SHUFFLE_PARTITIONS slots (10 with the setting below), i.e. more
  cores.
- ``spark.sql.shuffle.partitions = 2``: the aggregation runs 2 tasks, not 6.

2 + 2 = 4 slots. The shuffle partition count is fixed in the checkpoint at the
query's first run, so start on a NEW checkpoint location (the old one keeps 6).
If a source task cannot keep up with four topic partitions, add cores instead of
raising the counts past the slots.
"""

from pyspark.sql import functions as F

TASK_SLOTS = 4
SOURCE_TASKS = 2
SHUFFLE_PARTITIONS = 2

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    # Databricks Kafka option: 8 topic partitions read by 2 source tasks.
    "maxPartitions": str(SOURCE_TASKS),
}

assert SOURCE_TASKS + SHUFFLE_PARTITIONS <= TASK_SLOTS


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    """Start the query; ``checkpoint`` must be a new location (the old one fixed 6 shuffle partitions)."""
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
