"""Per-key event count that can move from micro-batch to real-time mode on the same checkpoint.

Open-source Spark 4.3 real-time mode needs state checkpoint format version 2. The session
default is 1, and a real-time query started on a checkpoint whose committed batches were written
in format 1 dies with ``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``. That happens
with the RocksDB and the default HDFS-backed state store alike, and for stateless queries too. The
format cannot be changed later for an existing checkpoint, so it must be set **before the
micro-batch query's first run**:

    configure(spark)                     # once, before the query first starts
    q = (counts(events).writeStream
         .outputMode("update")
         .option("checkpointLocation", ckpt)
         .trigger(processingTime="10 seconds")   # today: micro-batch
         .foreach(writer).start())

    # next quarter: the very same query and checkpoint, in real-time mode
    configure(spark)
    q = (counts(events).writeStream
         .outputMode("update")                    # real-time mode accepts only update
         .option("checkpointLocation", ckpt)
         .trigger(realTime="5 minutes")
         .foreach(writer).start())

The counts carry over. This was tested here with PySpark 4.3.0: micro-batch counts, then the same
checkpoint in real-time mode continuing them (see NOTES.md).

What ``configure`` sets, and why:

* ``spark.sql.streaming.stateStore.checkpointFormatVersion = 2``: the one setting the switch
  cannot do without.
* the RocksDB state store provider with changelog checkpointing. Spark 4.3 applies these as
  defaults to *real-time* queries, and it refuses an explicitly different provider at ``start()``
  (``STREAMING_REAL_TIME_MODE.SQL_CONFIGURATION_NOT_SUPPORTED``). The state written by the
  micro-batch run must already be RocksDB state, or the real-time run could not read it back
  (the provider is fixed in the checkpoint).
* ``spark.sql.shuffle.partitions``: fixed in the checkpoint at the first run, and in real-time
  mode every shuffle partition holds a task slot for the whole long batch (slots needed = source
  partitions + shuffle partitions). The default 200 would need 200+ slots. If the session still has
  the default, it is set to half the default parallelism. Set it yourself to what the real-time
  cluster will hold (see the skill's ``rtm_lakebase/calc/sizing.py``), *before the first run*.
* ``spark.sql.adaptive.enabled = false``: real-time queries do not support adaptive query execution.
  Streaming queries never use it anyway, so this only makes the session's intent explicit.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def configure(spark: SparkSession, shuffle_partitions: int | None = None) -> None:
    """Session settings to apply before the query's first (micro-batch) run, and again before every restart."""
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(int(shuffle_partitions)))
    elif spark.conf.get("spark.sql.shuffle.partitions") == "200":  # still the default: far too many slots for RTM
        slots = max(1, spark.sparkContext.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(max(1, slots // 2)))


def counts(events: DataFrame) -> DataFrame:
    """Events per key: columns ``k`` and ``count``. One shuffle, one stateful operator; works in both modes.

    Write it with ``outputMode("update")`` in both modes (real-time mode accepts only update), so the
    sink gets each key's new total whenever it changes.
    """
    return events.groupBy(F.col("k")).count()


__all__ = ["configure", "counts"]
