"""A per-key event count that can move from micro-batch to real-time mode on the same checkpoint.

Open-source Spark 4.3 refuses to run a real-time query on a checkpoint whose
committed batches were written in state-store checkpoint format 1, which is the
session default (``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``,
stateless queries included, with the RocksDB store and with the default
HDFS-backed store alike). Only settings in force when the micro-batch query
**first** runs are written into its checkpoint, so ``configure(spark)`` must run
before that first run:

* ``spark.sql.streaming.stateStore.checkpointFormatVersion = 2`` - the format
  real-time mode requires (with it the real-time run reuses the checkpoint and
  keeps the counts);
* the RocksDB state store provider with changelog checkpointing - real-time mode
  needs RocksDB (another provider set explicitly is refused with
  ``STREAMING_REAL_TIME_MODE.SQL_CONFIGURATION_NOT_SUPPORTED``) and state written
  by the default HDFS-backed provider cannot be read by RocksDB later, so the
  micro-batch run must already write RocksDB state;
* ``spark.sql.shuffle.partitions`` small and deliberate - the checkpoint fixes the
  number of state partitions at the first run, and a real-time query runs every
  stage at once, so the real-time cluster needs ``source partitions + shuffle
  partitions`` free task slots (else ``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``).
  The default of 200 would need 200 extra slots; changing it later needs a new
  checkpoint. Pass the value planned for the real-time cluster, or let
  ``configure`` pick one that fits this session's cores.

Nothing else needs changing for the switch: the query, its ``outputMode("update")``
and the checkpoint location stay the same; only the trigger changes, from e.g.
``processingTime="0 seconds"`` to ``realTime="5 minutes"`` (open-source minimum
5 seconds). Do not set ``asyncProgressTrackingEnabled`` (stateful real-time
queries commit synchronously) nor ``spark.sql.execution.sortBeforeRepartition=true``.
"""

from __future__ import annotations

from typing import Optional

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _task_slots(spark) -> Optional[int]:
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext
        return None


def configure(spark, shuffle_partitions: Optional[int] = None) -> None:
    """Session settings to apply before the counting query first runs (micro-batch or real-time)."""
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    if shuffle_partitions is None:
        current = int(spark.conf.get("spark.sql.shuffle.partitions", "200"))
        slots = _task_slots(spark)
        if slots is None:
            shuffle_partitions = current if current <= 8 else 2
        else:
            # leave at least as many slots for the source stage as the stateful stage takes
            shuffle_partitions = current if current <= slots // 2 and current >= 1 else max(1, slots // 2)
    if int(shuffle_partitions) < 1:
        raise ValueError("shuffle_partitions must be at least 1")
    spark.conf.set("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))


def counts(events):
    """Running count of events per key ``k``: columns ``k`` and ``count`` (write it with outputMode("update"))."""
    from pyspark.sql import functions as F

    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))


def start_micro_batch(events, writer, checkpoint: str):
    """Today's query (foreach writer upserting k -> count)."""
    return (counts(events).writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start())


def start_real_time(events, writer, checkpoint: str, trigger: str = "5 minutes"):
    """Next quarter: the very same query and checkpoint, real-time trigger."""
    return (counts(events).writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())


__all__ = ["configure", "counts", "start_micro_batch", "start_real_time"]
