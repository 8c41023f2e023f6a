"""Rows into Postgres through the pack's JVM foreach writer, started from PySpark (version-guarded upsert)."""

from rtm_lakebase.jvm import start_jvm_sink_query


def start(df, dsn, checkpoint):
    return start_jvm_sink_query(df, dsn=dsn, table="events", checkpoint_location=checkpoint,
                                key_columns=("id",), version_column="version")
