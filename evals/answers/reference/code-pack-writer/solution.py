"""The pack's hardened foreach writer, configured for a version-guarded upsert on id."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",), version_column="version"))
