"""Append-only payments: insert each event once; a replayed event is skipped, never written twice or changed."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def PaymentsWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, mode="insert_ignore", key_columns=("event_id",)))
