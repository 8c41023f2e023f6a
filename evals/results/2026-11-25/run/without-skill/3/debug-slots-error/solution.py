"""Fixed version of evals/files/slots_error.py.

Error: CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT. In real-time mode every stage of the query runs at the
same time, so the query needs a free slot for every task of every stage at once:
    source: 8 tasks (one per partition of `clicks`) + aggregation: 6 tasks (shuffle partitions) = 14 slots,
    but the cluster has 4.
Fix: 2 source tasks (Kafka maxPartitions = 2, each reads 4 topic partitions) + 2 shuffle partitions = 4 slots.
(The foreach sink runs in the aggregation stage, no extra slots.) This fills the cluster; for headroom use
8 slots (~50 % utilisation) in production.
The shuffle-partition count of a stateful query is stored in its checkpoint: start from a new checkpoint
location, otherwise the old 6 partitions are kept.
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": "2",
}

REALTIME_BATCH_DURATION = "5 minutes"


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream
            .queryName("clicks-per-page")
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
