"""Fixed version of evals/files/slots_query.py: runs in real-time mode on a cluster with 4 task slots.

Why it failed: in real-time mode all stages of the query run at the same time (the shuffle between them is
streamed, not materialised), so the query needs one free task slot for EVERY task of EVERY stage at once:

    before:  source stage  8 tasks (one per Kafka partition)
           + aggregation  200 tasks (spark.sql.shuffle.partitions = 200)
           = 208 slots needed, 4 available -> CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT

Fix: make the sum fit in the 4 slots.

    after:   source stage  2 tasks (Kafka maxPartitions = 2 -> each task reads 4 of the 8 topic partitions)
           + aggregation   2 tasks (spark.sql.shuffle.partitions = 2)
           = 4 slots needed, 4 available

(The foreach sink runs inside the aggregation stage, so it needs no extra slots.)

This uses the whole cluster (100 % of the slots); leave headroom (e.g. 8 slots, 50 %) in production.

Note: the number of shuffle partitions of a stateful query is fixed in its checkpoint - with an existing
checkpoint created at 200 partitions the new setting is ignored, so start from a new checkpoint location.
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    # group the 8 topic partitions into 2 source tasks
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
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
