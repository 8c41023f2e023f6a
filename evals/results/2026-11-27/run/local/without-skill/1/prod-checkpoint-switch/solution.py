"""Per-key event count that can move from micro-batch to real-time mode on the
same checkpoint (open-source Spark 4.3).

What is frozen into the checkpoint at the first run, and therefore has to be
right *before the query first runs*:

1. State store checkpoint format. Real-time mode refuses to start on state
   written in checkpoint format v1 (error
   STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED: a re-executed
   real-time batch could reuse the file names of a partially written failed
   batch and lose data). The format version is recorded in the checkpoint's
   offset-log metadata and wins over the session value on restart, so it must
   be ``spark.sql.streaming.stateStore.checkpointFormatVersion = 2`` from the
   very first micro-batch. v2 (checkpoint unique ids) is implemented by the
   RocksDB state store, so the provider is set to RocksDB as well (the
   provider class is also fixed by the checkpoint).
   (``spark.sql.streaming.realTimeMode.dangerouslyAllowCheckpointV1`` would
   bypass the check - deliberately NOT used.)

2. Number of shuffle partitions = number of state partitions of the count.
   It is also fixed by the checkpoint. Real-time mode schedules all stages at
   once and needs (source partitions + shuffle partitions) free task slots, so
   the default of 200 would make the later real-time run need 200+ slots.
   A small value is chosen here (``SHUFFLE_PARTITIONS``); size it to the
   real-time cluster: source partitions + SHUFFLE_PARTITIONS <= total cores.

3. Output mode: real-time mode supports only ``update``; run the micro-batch
   query with ``outputMode("update")`` too so the sink sees the same
   semantics before and after the switch (the sink must be one real-time
   mode accepts, e.g. Kafka or foreach, and the source must support it, e.g.
   Kafka).

The aggregation itself (``groupBy("k").count()``) is unchanged between the
two runs - same plan, same operator ids, same state schema - which is what lets
the real-time run resume from the micro-batch state.
"""

from pyspark.sql import DataFrame, SparkSession

SHUFFLE_PARTITIONS = 2

SESSION_CONF = {
    # RTM needs state checkpoint format v2 (checkpoint v1 is rejected)
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    # v2 is provided by the RocksDB state store
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # state partitions are fixed at first run and must fit RTM's concurrent slots
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
}


def configure(spark: SparkSession) -> SparkSession:
    """Apply the session settings; call before the query first runs (and keep
    them for every later run, micro-batch or real-time)."""
    for k, v in SESSION_CONF.items():
        spark.conf.set(k, v)
    return spark


def counts(events: DataFrame) -> DataFrame:
    """Per-key count of events: columns ``k`` and ``count``."""
    return events.groupBy("k").count()


__all__ = ["configure", "counts", "SESSION_CONF"]
