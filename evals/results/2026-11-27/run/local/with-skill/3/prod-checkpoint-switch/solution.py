"""Per-key event counts that can move from micro-batch to real-time mode on the same checkpoint.

Open-source Spark 4.3 refuses to run a real-time query on a checkpoint whose committed batches were
written in state-store checkpoint format 1 - the session default - with
``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED`` (stateful and stateless queries alike,
RocksDB or the default HDFS-backed store).  The format is recorded by the first run, so it has to be
set before the query ever runs: ``configure(spark)`` sets checkpoint format 2 (and the state store
real-time mode requires: RocksDB with changelog checkpointing, which real-time mode would otherwise
refuse or default differently from the micro-batch run), and fixes the shuffle partition count, which
the checkpoint also freezes at its first run and which real-time mode needs task slots for.

Run 1 (today, micro-batch)::

    configure(spark)
    q = (counts(events).writeStream.foreach(writer).outputMode("update")
         .option("checkpointLocation", ckpt).trigger(processingTime="1 second").start())

Run 2 (next quarter, same checkpoint, same session settings)::

    configure(spark)
    q = (counts(events).writeStream.foreach(writer).outputMode("update")
         .option("checkpointLocation", ckpt).trigger(realTime="5 minutes").start())

Keep ``outputMode("update")`` in both runs (real-time mode rejects append/complete), a real-time source
(Kafka) and a sink real-time mode accepts (``foreach`` or Kafka; not ``foreachBatch`` or ``memory``),
and make the sink an upsert on ``k``: delivery is at-least-once and the count only grows, so it can guard
against replays (newer count wins).  Real-time mode runs all stages at once: the cluster needs
(source partitions + ``SHUFFLE_PARTITIONS``) free task slots, else the query dies with
``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

#: Frozen into the checkpoint by the first run; sized for real-time slots (source tasks + this).
SHUFFLE_PARTITIONS = 4

SESSION_SETTINGS = {
    # the switch itself: real-time mode needs state checkpoint format v2 in every committed batch
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    # the state store real-time mode runs on (it refuses another provider); same in both runs
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # fixed by the checkpoint at its first run; keep it small and deliberate (default 200 = 200 slots)
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
}


def configure(spark: SparkSession) -> None:
    """Apply the settings before the query first runs (and again, unchanged, before every restart)."""
    for key, value in SESSION_SETTINGS.items():
        spark.conf.set(key, value)
    # real-time mode refuses an explicit sortBeforeRepartition=true; make sure none is set
    if spark.conf.get("spark.sql.execution.sortBeforeRepartition", "false").lower() == "true":
        spark.conf.set("spark.sql.execution.sortBeforeRepartition", "false")


def counts(events: DataFrame) -> DataFrame:
    """Events per key: columns ``k`` and ``count``. One aggregation = one shuffle (Databricks-safe too)."""
    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))
