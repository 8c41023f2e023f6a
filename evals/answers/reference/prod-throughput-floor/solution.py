"""Batched, version-guarded upserts through the pack's writer (one statement per flush of up to 1,000 keys)."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",), version_column="version"))
