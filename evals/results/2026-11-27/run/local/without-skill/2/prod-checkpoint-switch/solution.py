"""Per-key event count that can later be restarted in real-time mode on the
same checkpoint (open-source Spark 4.3).

Why the session must be configured from the very first run
----------------------------------------------------------
Real-time mode refuses a stateful query whose checkpoint was written with
state store checkpoint format v1 (the default):

    [STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED] Real-time mode
    does not support state store checkpoint format v1 ... use a fresh
    checkpoint location.

(A re-executed real-time batch could reuse the state file names of a
partially written failed batch; format v2 uses per-batch state store
checkpoint ids.)  The format is fixed when the checkpoint is created, so the
micro-batch query has to start with
``spark.sql.streaming.stateStore.checkpointFormatVersion = 2`` -- and format v2
is implemented by the RocksDB state store provider, so that provider is set
too.  (The escape hatch
``spark.sql.streaming.realTimeMode.dangerouslyAllowCheckpointV1.enabled`` exists
but accepts possible data loss on failure; not used.)

Other things that are frozen in the checkpoint and must not change between the
micro-batch run and the real-time run:
* ``spark.sql.shuffle.partitions`` (number of state partitions) -- set
  explicitly here; in real-time mode every shuffle partition is a
  long-running task, so keep it small (cluster must have source partitions +
  shuffle partitions free task slots).
* the query shape (same ``counts`` function, same grouping key / aggregate),
  and the output mode: real-time mode only supports ``update``, so run the
  micro-batch query in ``update`` mode from the start as well.

Usage::

    configure(spark)
    q = (counts(events).writeStream.outputMode("update")
           .foreach(writer).option("checkpointLocation", ckpt)
           .trigger(processingTime="10 seconds")      # today
           # .trigger(realTime="5 minutes")            # next quarter, same ckpt
           .start())
"""

from pyspark.sql import DataFrame, SparkSession

SHUFFLE_PARTITIONS = 8

SESSION_CONF = {
    # required for the later switch to real-time mode
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    # frozen in the checkpoint: pin it explicitly so both runs agree
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
}


def configure(spark: SparkSession) -> None:
    """Apply before the query runs for the first time (and on every restart)."""
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)


def counts(events: DataFrame) -> DataFrame:
    """Running number of events per key: columns ``k`` and ``count``.

    A plain streaming aggregation (allowed in real-time mode, update output).
    """
    return events.groupBy("k").count()
