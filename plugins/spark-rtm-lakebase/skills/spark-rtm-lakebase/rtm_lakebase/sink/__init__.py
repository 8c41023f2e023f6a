"""The Python ``foreach`` writer for Lakebase/Postgres: ``PostgresForeachWriter(connection, SinkSettings(...))``.

One module per job: :mod:`~rtm_lakebase.sink.writer` (the writer),
:mod:`~rtm_lakebase.sink.settings` (its knobs), :mod:`~rtm_lakebase.sink.rows`,
:mod:`~rtm_lakebase.sink.buffer`, :mod:`~rtm_lakebase.sink.flusher` (with
:mod:`~rtm_lakebase.sink.interrupt`),
:mod:`~rtm_lakebase.sink.target`, :mod:`~rtm_lakebase.sink.statements` (the SQL),
:mod:`~rtm_lakebase.sink.errors`, :mod:`~rtm_lakebase.sink.diagnosis` and
:mod:`~rtm_lakebase.sink.metrics`. The names a user needs are imported here;
the connection settings are in :mod:`rtm_lakebase.postgres`. The names load on first use, so a module
of this folder that needs no psycopg (``deprecated_names``, used by the fast foreach path) imports without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover - typing only
    from rtm_lakebase.sink.errors import BadRowError, SinkConnectionError, SinkError
    from rtm_lakebase.sink.metrics import SinkMetrics
    from rtm_lakebase.sink.settings import MODES, SinkMode, SinkSettings
    from rtm_lakebase.sink.statements import create_table_sql
    from rtm_lakebase.sink.writer import PostgresForeachWriter

#: Each public name and the module of this folder that defines it.
_WHERE = {"BadRowError": "errors", "SinkConnectionError": "errors", "SinkError": "errors", "SinkMetrics": "metrics",
          "MODES": "settings", "SinkMode": "settings", "SinkSettings": "settings",
          "create_table_sql": "statements", "PostgresForeachWriter": "writer"}

__all__ = ["MODES", "BadRowError", "PostgresForeachWriter", "SinkConnectionError", "SinkError", "SinkMetrics",
           "SinkMode", "SinkSettings", "create_table_sql"]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"rtm_lakebase.sink.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
