"""The pack's writer checks each flush and names a rejected row's key (BadRowError) instead of dropping it."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def ReadingsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",)))
