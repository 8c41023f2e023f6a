"""Per-key event count that can move from micro-batch to real-time mode on
the SAME checkpoint (open-source Spark 4.3).

Why these settings must be there from the very first run:

A stateful real-time query refuses to start on a checkpoint whose state was
written with state-store checkpoint format v1 -- the micro-batch default --
failing with ``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``
(the only escape hatch,
``spark.sql.streaming.realTimeMode.dangerouslyAllowCheckpointV1.enabled``,
risks losing state on failure).  Real-time mode only applies its RocksDB /
format-v2 defaults to real-time queries, and a micro-batch query keeps the
defaults (HDFS-backed provider, format v1).  The state provider and format of
an existing checkpoint cannot be changed afterwards, so the micro-batch query
has to be *born* with what real-time mode requires:

* ``spark.sql.streaming.stateStore.providerClass`` =
  ``org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider``
  (format v2 requires RocksDB; real-time mode rejects any other provider);
* ``spark.sql.streaming.stateStore.checkpointFormatVersion`` = ``2``
  (per-batch state checkpoint ids, required for real-time recovery);
* ``spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled`` =
  ``true`` (what real-time mode uses; same on both sides of the switch).

``spark.sql.execution.sortBeforeRepartition`` is left unset (setting it to
true would be rejected by real-time mode).

Usage::

    configure(spark)                       # before the query first runs
    q = (counts(events).writeStream.outputMode("update")
            .option("checkpointLocation", ckpt)
            .trigger(processingTime="10 seconds")      # today
            # .trigger(realTime="5 minutes")           # next quarter, same ckpt
            ...start())
"""

from pyspark.sql import functions as F

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def configure(spark):
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    spark.conf.set(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"
    )
    return spark


def counts(events):
    # Plain streaming aggregation (hash shuffle on k): supported by real-time
    # mode since Spark 4.3; output mode must be "update" in both modes.
    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))
