"""Per-key event count that can move from micro-batch to real-time mode on the same checkpoint
(open-source Spark 4.3).

    configure(spark)                       # once, before the query FIRST runs
    q = (counts(events).writeStream
           .outputMode("update")           # the only output mode real-time mode accepts
           .option("checkpointLocation", ckpt)
           .trigger(processingTime="0 seconds")   # today: micro-batch
           # next quarter, same checkpoint: .trigger(realTime="5 minutes")
           .start())

Why these settings must be in place from the very first run
-----------------------------------------------------------
A stateful real-time query requires the RocksDB state store with state-store
checkpoint format v2. Real-time mode applies those as defaults only to
real-time queries, so a micro-batch query started with the engine defaults
(HDFS-backed provider, checkpoint format v1) writes a checkpoint that real-time
mode later rejects: STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED.
Neither the provider nor the format of an existing checkpoint can be changed
afterwards. The only way around that is
spark.sql.streaming.realTimeMode.dangerouslyAllowCheckpointV1.enabled, which
risks losing state. So the micro-batch query has to run on RocksDB + format v2
from day one.

* ``spark.sql.shuffle.partitions`` is also frozen into the checkpoint (it is the
  number of state partitions). In real-time mode every partition needs its own
  long-running task, next to one task per Kafka partition. The default of 200
  would therefore need 200+ free cores, so a small fixed value is set now.
* changelog checkpointing is what real-time mode turns on for RocksDB. Enabling
  it now means the state layout is the same in both modes, and it also lowers
  micro-batch commit latency.
* ``sortBeforeRepartition=true`` is rejected by real-time mode, so the default
  is pinned to ``false`` here.
"""

from pyspark.sql import functions as F

# Number of state partitions; fixed forever by the first run's checkpoint.
# Size the real-time cluster for (Kafka partitions + this) concurrent tasks.
STATE_PARTITIONS = 8


def configure(spark):
    conf = spark.conf
    conf.set("spark.sql.streaming.stateStore.providerClass",
             "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    conf.set("spark.sql.execution.sortBeforeRepartition", "false")
    conf.set("spark.sql.shuffle.partitions", str(STATE_PARTITIONS))
    return spark


def counts(events):
    """Running count per key k; columns: k, count."""
    return events.groupBy(F.col("k")).agg(F.count(F.lit(1)).alias("count"))
