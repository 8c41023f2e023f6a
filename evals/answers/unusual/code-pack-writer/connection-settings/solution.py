"""A class wrapping the pack's writer, the connection built from the DSN first; settings kept in a dict."""

from rtm_lakebase.postgres import ConnectionSettings
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

OPTIONS = {"key_columns": ("id",), "version_column": "version", "max_batch_rows": 50}


class EventsWriter(PostgresForeachWriter):
    def __init__(self, dsn, table):
        super().__init__(ConnectionSettings.from_dsn(dsn), SinkSettings(table=table, **OPTIONS))
