"""One connection per sink task (reused by the next task of the same Python worker), never a pool per task."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def EventsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",), version_column="version"))
