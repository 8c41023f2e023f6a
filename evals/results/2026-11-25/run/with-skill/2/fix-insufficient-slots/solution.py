"""Fixed: the clicks-per-page real-time query now fits a cluster with 4 task slots.

Why it failed
    A real-time query schedules every task of every stage at once and keeps
    them running for the whole long batch, so it needs
        slots >= source tasks + shuffle partitions of each stateful stage.
    The original needed 8 (one source task per Kafka partition)
    + 200 (spark.sql.shuffle.partitions for the groupBy) = 208 slots, on a
    cluster with 4: CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT.

The fix (2 + 2 = 4 slots)
    - SHUFFLE_PARTITIONS = 2: the aggregation's stage runs 2 tasks.
    - KAFKA_OPTIONS["maxPartitions"] = "2": the source stage runs 2 tasks,
      each reading 4 of the topic's 8 partitions. ``maxPartitions`` is the
      Databricks Kafka option for real-time mode (several topic partitions per
      task); it is the lever that makes an 8-partition topic fit in 4 slots.
      Each of the 2 source tasks must keep up with 4 partitions' traffic:
      watch the input vs processing rate and add cores (raise maxPartitions and
      shuffle partitions together) if the source stage falls behind.
    Total: 2 source tasks + 2 shuffle tasks = 4 slots, exactly the cluster.
    This leaves no headroom (Databricks suggests ~50 % utilisation, and a task
    re-run after a lost executor needs a free slot); with 8 slots the same
    numbers run at 50 %.

Must-knows
    - NEW CHECKPOINT: the number of shuffle partitions is fixed in the
      checkpoint at a stateful query's first run; a restart on the old
      checkpoint keeps 200 partitions and fails the same way. Start this query
      on a fresh checkpoint location (the counts start over; Kafka
      ``startingOffsets`` decides where reading begins).
    - Open-source Apache Spark has no ``maxPartitions`` in real-time mode: it
      maps Kafka partitions to tasks 1:1, so there the same query needs
      8 + shuffle partitions slots (>= 9): more cores, or a topic with fewer
      partitions. On Databricks also keep: Runtime 16.4 LTS+, classic compute,
      Photon/autoscaling/spot off, cluster flag
      ``spark.databricks.streaming.realTimeMode.enabled true``, and no other
      query holding slots on the cluster.
    - ``realTime="5 minutes"`` is the checkpoint interval, not a latency;
      update output mode is required and kept. The foreach sink is
      at-least-once: the writer should upsert on ``page`` (counts only grow,
      so ``count`` can serve as the version guard).
"""

from pyspark.sql import functions as F

#: partitions of the aggregation's shuffle stage (one task slot each, held all the time)
SHUFFLE_PARTITIONS = 2

#: source tasks after grouping the topic's 8 partitions (one task slot each)
MAX_SOURCE_TASKS = 2

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": str(MAX_SOURCE_TASKS),  # Databricks: 8 topic partitions read by 2 tasks
}

CLUSTER_SLOTS = 4
TOPIC_PARTITIONS = 8
REQUIRED_SLOTS = min(TOPIC_PARTITIONS, MAX_SOURCE_TASKS) + SHUFFLE_PARTITIONS
assert REQUIRED_SLOTS <= CLUSTER_SLOTS, (REQUIRED_SLOTS, CLUSTER_SLOTS)


def configure(spark):
    """Session settings, before the query is defined and started (on a NEW checkpoint)."""
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    """Start the real-time count per page; ``checkpoint`` must be a fresh location (see above)."""
    configure(spark)  # idempotent: makes sure the aggregation plans 2 shuffle partitions
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
