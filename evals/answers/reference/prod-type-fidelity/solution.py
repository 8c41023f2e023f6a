"""Upsert ledger rows through the pack's foreach writer: values go to Postgres as typed parameters."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def LedgerWriter(dsn, table):
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",)))
