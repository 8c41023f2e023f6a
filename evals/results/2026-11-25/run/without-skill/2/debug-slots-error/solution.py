"""Fixed evals/files/slots_error.py: clicks-per-page in real-time mode on a 4-slot cluster.

Diagnosis
---------
CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT: real-time mode runs all stages of the query at once, as
long-running tasks (the Kafka source stage and the aggregation stage form one pipelined group), so
the cluster must have a free slot for every task of every stage simultaneously:

    Kafka source tasks = 8 (one per topic partition, no maxPartitions set)
  + aggregation tasks  = 6 (spark.sql.shuffle.partitions)
  = 14 slots required  >  4 available.

Fix
---
    Kafka maxPartitions = 2   -> 2 source tasks (each reads 4 of the 8 topic partitions)
  + shuffle partitions  = 2   -> 2 aggregation tasks
  = 4 slots required  <=  4 available.

The number of shuffle partitions of a stateful query is fixed in its checkpoint: start the fixed
query on a NEW checkpoint location.  4/4 slots is 100 % utilisation - it runs, but any other job on the
cluster would block it; prefer more cores (e.g. ~50 % utilisation) for production.
"""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2
SOURCE_TASKS = 2          # Kafka maxPartitions
AVAILABLE_SLOTS = 4
assert SOURCE_TASKS + SHUFFLE_PARTITIONS <= AVAILABLE_SLOTS

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
    return (counts.writeStream.foreach(writer).outputMode("update")
            .queryName("clicks-per-page")
            .option("checkpointLocation", checkpoint)   # fresh location (see above)
            .trigger(realTime="5 minutes")
            .start())
