"""The pack's writer, but without the version guard: a late replay of an older version wins."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",)))
