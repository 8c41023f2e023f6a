"""Fixed version of evals/files/slots_query.py: runs in real-time mode on a 4-slot cluster.

Why it failed
-------------
Real-time mode schedules *all* stages of the query at the same time, as long-running tasks
(the Kafka source stage and the aggregation stage are one pipelined group).  The query therefore
needs, concurrently:

    source tasks (one per Kafka topic partition by default)  = 8
  + aggregation tasks (spark.sql.shuffle.partitions)         = 200
  = 208 task slots  >  4 available  -> CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT at start.

Fix
---
Fit the whole pipelined group into the 4 slots:

    source tasks: Kafka option maxPartitions = 2  (each source task reads 4 of the 8 topic partitions)
  + shuffle partitions = 2
  = 4 task slots  <=  4 available.

Notes
-----
* maxPartitions caps the number of Kafka source tasks in real-time mode (it is the knob Databricks
  documents for real-time sizing); minPartitions is not supported in real-time mode.
* The number of shuffle partitions of a stateful query is recorded in its checkpoint, so after this
  change the query must start from a NEW checkpoint location (the old one was created with 200).
* 4 of 4 slots is 100 % utilisation: it starts and runs, but leaves no headroom; for production add
  cores (e.g. aim for ~50 % utilisation) rather than shrinking further.
* Run this as the only real-time query on the cluster: other jobs competing for the 4 slots would make
  it fail to start again.
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2
SOURCE_TASKS = 2                     # Kafka maxPartitions
TASK_SLOTS = 4
assert SOURCE_TASKS + SHUFFLE_PARTITIONS <= TASK_SLOTS

KAFKA_OPTIONS = {
    "kafka.bootstrap.servers": "broker:9092",
    "subscribe": "clicks",
    "maxPartitions": str(SOURCE_TASKS),
}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    configure(spark)  # must be set before the query is planned
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint)   # use a fresh location (see notes)
            .trigger(realTime="5 minutes")
            .start())
