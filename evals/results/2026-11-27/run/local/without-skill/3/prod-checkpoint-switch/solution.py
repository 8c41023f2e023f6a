"""Per-key event count that can move from micro-batch to real-time mode on the
same checkpoint (open-source Spark 4.3).

Why the settings matter *from the first run*
--------------------------------------------
Everything below is recorded in, or fixed by, the checkpoint the first time the
query runs; it cannot be changed later without a new checkpoint (= losing the
counts):

* ``spark.sql.streaming.stateStore.checkpointFormatVersion = 2``
  Real-time mode refuses state-store checkpoint format v1
  (``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``: a re-executed
  real-time batch could reuse the state file names of a partially written
  failed batch).  v1 is the open-source default, so a micro-batch query started
  with defaults can never be restarted in real-time mode on its checkpoint.
  (The escape hatch ``spark.sql.streaming.realTimeMode.dangerouslyAllowCheckpointV1.enabled``
  accepts possible data loss - not acceptable for counts we want to keep.)
* ``spark.sql.streaming.stateStore.providerClass = RocksDBStateStoreProvider``
  checkpoint format v2 is implemented by the RocksDB state store only, and the
  provider cannot be changed on an existing checkpoint.
* ``spark.sql.shuffle.partitions``: fixed by the checkpoint for the stateful
  aggregation.  Real-time mode runs every stage at once, so the cluster needs
  (source partitions + shuffle partitions) free task slots, otherwise the
  query fails with CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT.  The default 200
  would make the switch impossible on any normal cluster.  configure() keeps an
  explicitly chosen value (anything but 200) and otherwise picks half of the
  cluster's default parallelism (at least 1), leaving the other half for the
  source partitions - size it for the real-time cluster you will run on.
* ``spark.sql.streaming.aggregation.stateFormatVersion = 2`` (the default,
  pinned so the state layout read by real-time mode's aggregation operator is
  the one written by the micro-batch runs).

The query itself must already be valid for real-time mode: a plain
``groupBy(k).count()`` (supported stateful aggregation), written with
``outputMode("update")`` in both modes (real-time mode supports only update;
``complete`` would not survive the switch), to a sink real-time mode accepts
(Kafka / foreach, not memory / foreachBatch).  Only the trigger changes::

    q = (counts(events).writeStream.outputMode("update")
           .option("checkpointLocation", ckpt)
           .foreach(writer)                      # or .format("kafka")...
           .trigger(processingTime="10 seconds")  # today
           # .trigger(realTime="5 minutes")       # next quarter, same checkpoint
           .start())
"""

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

SETTINGS = {
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
}


def configure(spark: SparkSession) -> None:
    """Apply before the query runs for the first time (and keep for every restart)."""
    for k, v in SETTINGS.items():
        spark.conf.set(k, v)
    current = spark.conf.get("spark.sql.shuffle.partitions", "200")
    if str(current) == "200":  # untouched default: far too many for real-time mode
        try:
            slots = spark.sparkContext.defaultParallelism
        except Exception:  # e.g. Spark Connect: no SparkContext
            slots = 4
        spark.conf.set("spark.sql.shuffle.partitions", str(max(1, int(slots) // 2)))


def counts(events: DataFrame) -> DataFrame:
    """Running number of events per key k: columns (k, count)."""
    return events.groupBy("k").agg(F.count(F.lit(1)).alias("count"))


__all__ = ["configure", "counts", "SETTINGS"]
