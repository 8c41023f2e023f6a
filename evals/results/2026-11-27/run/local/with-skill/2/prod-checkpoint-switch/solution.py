"""Per-key event count that can move from micro-batch to real-time mode on the same checkpoint.

    configure(spark)                       # before the query's FIRST run, and in every later session
    counts(events).writeStream.foreach(writer).outputMode("update") \\
        .option("checkpointLocation", chk).trigger(processingTime="10 seconds").start()    # today
    counts(events).writeStream.foreach(writer).outputMode("update") \\
        .option("checkpointLocation", chk).trigger(realTime="5 minutes").start()          # next quarter

What has to be right from the first run (open-source Spark 4.3)
---------------------------------------------------------------
* ``spark.sql.streaming.stateStore.checkpointFormatVersion = 2``.  The session default is 1, and a
  real-time query refuses a checkpoint whose committed batches were written in format 1 with
  ``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED`` (stateless queries too, and with
  the RocksDB or the default HDFS-backed store alike).  The format is recorded with the committed
  batches, so it cannot be fixed later without a fresh checkpoint, i.e. losing the counts.
* The RocksDB state store with changelog checkpointing.  Real-time mode in 4.3 runs stateful
  queries on RocksDB (it applies it as the default and refuses another provider explicitly set);
  a checkpoint's state must be read back by the provider that wrote it, so the micro-batch runs
  must already use RocksDB.
* ``spark.sql.shuffle.partitions`` small and fixed.  The checkpoint pins the number of shuffle
  partitions of the aggregation forever, and a real-time query needs a free task slot for every
  source partition plus every shuffle partition at once (the default 200 would need 200 + source
  slots, failing with ``CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT``).  ``configure`` keeps a value
  the session already set explicitly and otherwise lowers the default 200 to half the default
  parallelism; pass ``shuffle_partitions`` to choose (then size the real-time cluster for
  source partitions + that number).
* Do not set ``spark.sql.execution.sortBeforeRepartition=true`` (real-time mode refuses it), and
  keep the query identical: same aggregation, same output columns, update output mode (the only
  mode real-time mode accepts, and valid for the micro-batch runs too).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_SPARK_DEFAULT_SHUFFLE_PARTITIONS = "200"


def configure(spark: Any, shuffle_partitions: int | None = None) -> None:
    """Session settings to apply before the query's first run (and in every session that runs it)."""
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    if shuffle_partitions is not None:
        if shuffle_partitions < 1:
            raise ValueError(f"shuffle_partitions must be at least 1, got {shuffle_partitions}")
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    elif spark.conf.get("spark.sql.shuffle.partitions") == _SPARK_DEFAULT_SHUFFLE_PARTITIONS:
        # still Spark's default: 200 shuffle tasks would be pinned into the checkpoint
        parallelism = spark.sparkContext.defaultParallelism
        spark.conf.set("spark.sql.shuffle.partitions", str(max(1, parallelism // 2)))
    # real-time mode refuses an explicit sortBeforeRepartition=true; leave it at its default
    if spark.conf.get("spark.sql.execution.sortBeforeRepartition", "false").lower() == "true":
        spark.conf.unset("spark.sql.execution.sortBeforeRepartition")


def counts(events: DataFrame) -> DataFrame:
    """Events per key: columns ``k`` and ``count`` (one shuffle, one stateful operator).

    Under update output mode each micro-batch, and each input row in real-time mode, emits the
    new running count of its key: upsert the rows on ``k`` in the sink.
    """
    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))
