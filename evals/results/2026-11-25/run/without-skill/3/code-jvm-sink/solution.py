"""Rows (id, version, payload) -> Postgres table `events` through the pack's JVM foreach writer, started
from PySpark, version-guarded upsert (newest version wins), real-time trigger "5 minutes".

Why the JVM writer: a Python foreach writer receives rows through a Python worker fed by an adaptive
pickling batch that waits to fill (seconds of lag at low rates); a JVM ForeachWriter is called inside the
sink task itself, so rows reach Postgres with only the JDBC round trip.

IMPORTANT - not verifiable in this arm: the pack's package (`rtm_lakebase`, shipped with the skill) and its
JVM writer are not available to me (the only copy on the machine is in a source tree I may not read), so I
do not know its Python entry point or JVM class name. This module therefore:
  1. uses the pack's own PySpark starter if `rtm_lakebase` exposes exactly one public callable whose name
     mentions "jvm" and that takes a DataFrame (found by introspection, called with the arguments it
     declares among df/dsn/table/checkpoint/trigger/key/version columns);
  2. otherwise attaches the JVM writer class itself through py4j
     (df._jdf.writeStream().foreach(<JVM ForeachWriter>) + Trigger.RealTime), taking the class name from
     `rtm_lakebase.JVM_WRITER_CLASS` if present or the RTM_LAKEBASE_JVM_WRITER_CLASS environment variable,
     with a (dsn, table) constructor; its jar must be on the cluster classpath (spark.jars);
  3. raises a clear error if neither is possible - it never silently falls back to a Python writer.
"""

import functools
import importlib
import inspect
import os

from pyspark.sql import DataFrame
from pyspark.sql.streaming.query import StreamingQuery

TABLE = "events"
KEY_COLUMN = "id"
VERSION_COLUMN = "version"
REALTIME_BATCH_DURATION = "5 minutes"     # default real-time trigger: epoch/checkpoint duration


def _pack():
    try:
        return importlib.import_module("rtm_lakebase")
    except ImportError as e:
        raise ImportError("rtm_lakebase (the pack's package with the JVM writer) is not installed") from e


def _pack_jvm_starter(pack):
    found = []
    for name, obj in vars(pack).items():
        if name.startswith("_") or not callable(obj) or "jvm" not in name.lower():
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        if "df" in params or "dataframe" in params:
            found.append(obj)
    return found[0] if len(found) == 1 else None


def _call_with_known_args(fn, df, dsn, checkpoint):
    available = {
        "df": df, "dataframe": df, "dsn": dsn, "url": dsn, "table": TABLE, "checkpoint": checkpoint,
        "checkpoint_location": checkpoint, "trigger": REALTIME_BATCH_DURATION,
        "real_time": REALTIME_BATCH_DURATION, "realtime": REALTIME_BATCH_DURATION,
        "key": KEY_COLUMN, "key_column": KEY_COLUMN, "version": VERSION_COLUMN,
        "version_column": VERSION_COLUMN,
    }
    params = inspect.signature(fn).parameters
    kwargs = {n: available[n] for n in params if n in available}
    return fn(**kwargs)


def _jvm_class(spark, name):
    return functools.reduce(getattr, name.split("."), spark._jvm)


def start(df: DataFrame, dsn: str, checkpoint: str) -> StreamingQuery:
    rows = df.select("id", "version", "payload")
    pack = _pack()

    starter = _pack_jvm_starter(pack)
    if starter is not None:
        return _call_with_known_args(starter, rows, dsn, checkpoint)

    class_name = getattr(pack, "JVM_WRITER_CLASS", None) or os.environ.get("RTM_LAKEBASE_JVM_WRITER_CLASS")
    if not class_name:
        raise RuntimeError("Cannot locate the pack's JVM foreach writer: rtm_lakebase exposes no JVM starter "
                           "and no JVM_WRITER_CLASS, and RTM_LAKEBASE_JVM_WRITER_CLASS is not set.")
    spark = rows.sparkSession
    jwriter = _jvm_class(spark, class_name)(dsn, TABLE)     # version-guarded upsert on id (pack writer)
    trigger = getattr(spark._jvm, "org.apache.spark.sql.streaming.Trigger").RealTime(REALTIME_BATCH_DURATION)
    jquery = (rows._jdf.writeStream()
              .foreach(jwriter)
              .outputMode("update")
              .option("checkpointLocation", checkpoint)
              .trigger(trigger)
              .start())
    return StreamingQuery(jquery)
