"""The Python ``foreach`` writer for Lakebase/Postgres: ``PostgresForeachWriter(connection, SinkSettings(...))``.

One module per job: :mod:`~rtm_lakebase.sink.writer` (the writer),
:mod:`~rtm_lakebase.sink.settings` (its knobs), :mod:`~rtm_lakebase.sink.rows`,
:mod:`~rtm_lakebase.sink.buffer`, :mod:`~rtm_lakebase.sink.flusher` (with
:mod:`~rtm_lakebase.sink.interrupt`),
:mod:`~rtm_lakebase.sink.target`, :mod:`~rtm_lakebase.sink.statements` (the SQL),
:mod:`~rtm_lakebase.sink.errors`, :mod:`~rtm_lakebase.sink.diagnosis` and
:mod:`~rtm_lakebase.sink.metrics`. The names a user needs are imported here;
the connection settings are in :mod:`rtm_lakebase.postgres`.
"""

from rtm_lakebase.sink.errors import BadRowError, SinkConnectionError, SinkError
from rtm_lakebase.sink.metrics import SinkMetrics
from rtm_lakebase.sink.settings import MODES, SinkMode, SinkSettings
from rtm_lakebase.sink.statements import create_table_sql
from rtm_lakebase.sink.writer import PostgresForeachWriter

__all__ = ["MODES", "BadRowError", "PostgresForeachWriter", "SinkConnectionError", "SinkError", "SinkMetrics",
           "SinkMode", "SinkSettings", "create_table_sql"]
