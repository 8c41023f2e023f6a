"""clicks-per-page in real-time mode on a 4-slot cluster.

Diagnosis
  CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT: real-time mode schedules all
  stages of the query at once, so it needs
      source tasks (8: one per partition of `clicks`)
    + shuffle tasks (6: spark.sql.shuffle.partitions for the groupBy)
    = 14 free task slots, and the cluster has 4.

Fix
  * Kafka `maxPartitions = 2`: the 8 topic partitions are read by 2 tasks
    (4 topic partitions each).
  * spark.sql.shuffle.partitions = 2.
  * 2 + 2 = 4 slots = the cluster's 4. (No headroom: keep the cluster
    dedicated to this query.)
  * Use a fresh checkpoint location: a stateful query keeps the number of
    shuffle partitions recorded in its checkpoint (6), which would override
    the new setting.
"""
from pyspark.sql import functions as F

TASK_SLOTS = 4
SOURCE_TASKS = 2
SHUFFLE_PARTITIONS = 2

assert SOURCE_TASKS + SHUFFLE_PARTITIONS <= TASK_SLOTS

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": str(SOURCE_TASKS),
}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (
        counts.writeStream.foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .queryName("clicks-per-page")
        .trigger(realTime="5 minutes")
        .start()
    )
