"""Per-key event counts that can move from micro-batch to real-time mode on the same checkpoint.

Open-source Spark 4.3 refuses to run a real-time query on a checkpoint whose
committed batches were written in state-store checkpoint format 1, the session
default (``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``), whichever
state store wrote it, stateless queries included. Real-time mode also requires
the RocksDB state store and format 2 (an explicit format 1 or another provider is
refused at start with ``STREAMING_REAL_TIME_MODE.SQL_CONFIGURATION_NOT_SUPPORTED``).
So the session must write format 2 with RocksDB from the query's FIRST
micro-batch run; then the same query restarted with ``trigger(realTime=...)`` on
the same checkpoint keeps its counts.

Usage::

    configure(spark)                     # before the query first runs, and again before every restart
    q = (counts(events).writeStream
           .outputMode("update")
           .foreach(writer)              # or any sink both modes accept (Kafka, foreach)
           .option("checkpointLocation", ck)
           .trigger(processingTime="10 seconds")   # today
           .start())
    # next quarter, same session settings, same checkpoint, same query:
    #      .trigger(realTime="5 minutes")

Keep the query itself unchanged across the switch (same grouping, same
``spark.sql.shuffle.partitions``: the state's partition count is fixed by the
checkpoint at the first run) and use update output mode in both, the only mode
real-time queries take.
"""
from __future__ import annotations

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def configure(spark) -> None:
    """Session settings to apply before the query's first (micro-batch) run, and before every restart."""
    # 1. State-store checkpoint format 2: what real-time mode requires of the checkpoint it resumes.
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    # 2. RocksDB state store (format 2 needs it; real-time mode refuses any other provider).
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    # 3. Changelog checkpointing: the default real-time mode applies; commits write only changed keys.
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    # 4. A small, deliberate shuffle partition count, fixed into the checkpoint by the first run:
    #    a real-time query holds (source partitions + shuffle partitions) task slots at once, so the
    #    default of 200 could never be scheduled later. Half the cluster's cores leaves the other half
    #    for the source tasks. Keep whatever value the first run used for every later run.
    try:
        cores = int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no sparkContext
        cores = 4
    spark.conf.set("spark.sql.shuffle.partitions", str(max(1, cores // 2)))


def counts(events):
    """Running count of events per key ``k`` (columns ``k``, ``count``); runs in micro-batch and real-time mode."""
    return events.groupBy("k").count()
