"""The JVM sink's options in a dict; the trigger spelled out; the module imported whole."""

import rtm_lakebase.jvm as jvm_sink

SINK = {"table": "events", "upsertkey": ("id",), "version_column": "version", "batchinterval_ms": 10,
        "trigger": {"realTime": "5 minutes"}}


def start(df, dsn, checkpoint):
    return jvm_sink.start_jvm_sink_query(df, dsn=dsn, checkpoint_location=checkpoint, **SINK)
