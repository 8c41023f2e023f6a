"""start(df, dsn, checkpoint): rows (id, version, payload) -> Postgres table `events`, real-time mode.

Intended path (as the task asks): the pack's JVM foreach writer, started from PySpark through the
pack's Python package (`rtm_lakebase`), doing a version-guarded upsert
    INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE events.version < EXCLUDED.version
with the default real-time trigger of 5 minutes.  A JVM writer keeps every row inside the task
thread (no Python worker hop and no auto-batched pickling), which is why it has the lowest sink
latency available from Python.

In this environment the `rtm_lakebase` package (and the JAR holding its JVM writer) is NOT
installed, so its API could not be inspected.  start() therefore:
  1. uses the pack if it is importable (entry-point names below are unverified guesses);
  2. otherwise, if a JVM ForeachWriter class is on the driver/executor classpath
     (RTM_JVM_WRITER_CLASS, constructor (String dsn, String table)), builds it through py4j and
     starts the query on the JVM side: df._jdf.writeStream().foreach(writer)...;
  3. otherwise falls back - with a logged warning - to the bundled hardened *Python* foreach writer
     (pg_events_writer.EventsWriter: same idempotent, version-guarded upsert, retries across restarts,
     no swallowed errors), which is correct but has the Python-hop latency.
"""

import importlib
import logging
import os

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

TABLE = "events"
TRIGGER = "5 minutes"          # default real-time trigger (checkpoint interval, not latency)
JVM_WRITER_CLASS = os.environ.get("RTM_JVM_WRITER_CLASS")   # e.g. a ForeachWriter[Row] on the classpath

_PACK_CANDIDATES = (
    ("rtm_lakebase", "start_jvm_sink"),
    ("rtm_lakebase.jvm", "start_jvm_sink"),
    ("rtm_lakebase.jvm", "start"),
)


def _start_with_pack(df, dsn, checkpoint):
    for module_name, attr in _PACK_CANDIDATES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        fn = getattr(module, attr, None)
        if fn is not None:
            return fn(df, dsn=dsn, table=TABLE, key="id", version_column="version",
                      checkpoint=checkpoint, trigger=TRIGGER)
    return None


def _start_with_jvm_class(df, dsn, checkpoint, class_name):
    spark = df.sparkSession
    jvm = spark._jvm
    jclass = jvm
    for part in class_name.split("."):        # py4j: jvm.com.example.Writer(dsn, table)
        jclass = getattr(jclass, part)
    jwriter = jclass(dsn, TABLE)
    jtrigger = jvm.org.apache.spark.sql.streaming.Trigger.RealTime(TRIGGER)
    jquery = (df.select("id", "version", "payload")._jdf.writeStream()
              .foreach(jwriter)
              .outputMode("update")
              .option("checkpointLocation", checkpoint)
              .trigger(jtrigger)
              .start())
    return StreamingQuery(jquery)


def start(df: DataFrame, dsn: str, checkpoint: str) -> StreamingQuery:
    query = _start_with_pack(df, dsn, checkpoint)
    if query is not None:
        return query
    if JVM_WRITER_CLASS:
        return _start_with_jvm_class(df, dsn, checkpoint, JVM_WRITER_CLASS)
    log.warning("rtm_lakebase (JVM writer) is not installed: falling back to the bundled Python "
                "foreach writer; correct, but with Python-hop sink latency")
    from pg_events_writer import EventsWriter
    return (df.select("id", "version", "payload").writeStream
            .foreach(EventsWriter(dsn, TABLE))
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=TRIGGER)
            .start())
