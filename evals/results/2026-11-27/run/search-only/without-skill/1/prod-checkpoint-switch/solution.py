"""Per-key event count that can move from micro-batch to real-time mode on the same checkpoint.

Open-source Spark 4.3.  Usage (first run, micro-batch)::

    configure(spark)
    q = (counts(events).writeStream
           .outputMode("update")
           .option("checkpointLocation", ckpt)
           .trigger(processingTime="1 second")      # later: .trigger(realTime="5 minutes")
           .format(...)/.foreach(...)
           .start())

Why these settings must be in place *before the first micro-batch run*
--------------------------------------------------------------------
A stateful real-time query only starts on a checkpoint whose commit log / state
store checkpoints use **checkpoint format v2** (per-batch state-store checkpoint
ids).  A checkpoint written by a micro-batch query with the defaults (format v1,
HDFS-backed state store) makes the real-time restart fail with
``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED`` (the only way
around it is the explicitly "dangerous" flag, which risks losing state).
Real-time mode applies v2 + RocksDB as *soft defaults only for real-time
queries*, so the micro-batch run must set them itself:

* ``spark.sql.streaming.stateStore.providerClass`` = RocksDBStateStoreProvider
  (format v2 requires RocksDB; the provider is also fixed by the checkpoint, and
  real-time mode rejects any other provider);
* ``spark.sql.streaming.stateStore.checkpointFormatVersion`` = 2;
* ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` = true
  (what real-time mode uses; shortens the state commit between batches);
* ``spark.sql.shuffle.partitions`` small and fixed: the number of state
  partitions is frozen into the checkpoint by the first run, and in real-time
  mode every shuffle partition is a long-running task that needs its own core in
  addition to the source's reader tasks.  The default (200) would make the
  real-time restart unschedulable on a normal cluster.
* ``spark.sql.execution.sortBeforeRepartition`` = false (real-time mode rejects
  ``true``; harmless for micro-batch).

The query itself is a plain streaming aggregation (supported in real-time mode
since Spark 4.3 via the pipelined streaming shuffle); it must run in ``update``
output mode in both modes (real-time mode supports only update), and must stay
identical across the switch so the state schema matches.
"""

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

# Number of state/shuffle partitions, fixed forever by the first run's checkpoint.
# Real-time mode needs (#source partitions + this) free cores.
STATE_PARTITIONS = 2


def configure(spark):
    """Session settings to apply before the query runs for the first time."""
    conf = {
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        "spark.sql.shuffle.partitions": str(STATE_PARTITIONS),
        "spark.sql.execution.sortBeforeRepartition": "false",
    }
    for key, value in conf.items():
        spark.conf.set(key, value)
    return conf


def counts(events):
    """Running number of events per key ``k``: columns ``k`` and ``count``."""
    from pyspark.sql import functions as F

    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))
