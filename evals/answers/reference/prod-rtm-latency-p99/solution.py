"""Rows into Postgres through the pack's JVM foreach writer: no Python worker on the row path, flushes every 100 ms."""

from rtm_lakebase.jvm import start_jvm_sink_query


def start(df, dsn, table, checkpoint):
    return start_jvm_sink_query(df, dsn=dsn, table=table, checkpoint_location=checkpoint, upsertkey="id",
                                batchinterval_ms=100)
