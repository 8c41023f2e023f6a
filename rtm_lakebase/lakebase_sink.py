"""Production foreach writer for Lakebase/Postgres: idempotent batched upserts, dwell-time flushes, retries.

``PostgresForeachWriter(connection, SinkSettings(...))`` is a PySpark
``foreach`` writer (``open``/``process``/``close``) for real-time mode and
micro-batch queries. One connection per task, opened in ``open()``; modes
``"upsert"`` (``INSERT … ON CONFLICT DO UPDATE`` from unnest arrays, skipping
no-op updates, optional version guard), ``"insert_ignore"`` (``ON CONFLICT DO
NOTHING``) and ``"append"`` (``COPY``). Its parts, one job each:

- :mod:`~rtm_lakebase.sink_rows` — rows matched to columns by name; values checked per flush;
- :mod:`~rtm_lakebase.sink_buffer` — one row per key, handed over sorted by key;
- :mod:`~rtm_lakebase.sink_flusher` — the thread that writes full and old buffers;
- :mod:`~rtm_lakebase.sink_target` — connection, statement, one flush with retries;
- :mod:`~rtm_lakebase.sink_errors` and :mod:`~rtm_lakebase.sink_diagnosis` — what a
  failure is and which row caused it.

A bad row raises :class:`BadRowError` naming its key and column, and nothing of
its flush is written; the password never shows in ``repr``, logs or messages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from rtm_lakebase.pg_connection import ConnectionSettings, as_connection_settings
from rtm_lakebase.pg_statements import split_table_name
from rtm_lakebase.sink_buffer import RowBuffer
from rtm_lakebase.sink_errors import BadRowError, SinkConnectionError, SinkError
from rtm_lakebase.sink_flusher import Flusher
from rtm_lakebase.sink_metrics import SinkMetrics
from rtm_lakebase.sink_rows import RowLayout
from rtm_lakebase.sink_target import PostgresTarget

log = logging.getLogger(__name__)

SinkMode = Literal["upsert", "insert_ignore", "append"]
MODES: tuple[str, ...] = get_args(SinkMode)


# --8<-- [start:sink_settings]
@dataclass(frozen=True)
class SinkSettings:
    """What to write and how. Every knob of the writer lives here."""

    table: str                              # "events", "sales.events", '"Sales"."Events"' (as SQL reads it)
    schema: str | None = None               # set: table is one exact name in this schema
    mode: SinkMode = "upsert"               # "upsert" | "insert_ignore" | "append"
    key_columns: tuple[str, ...] = ()       # () → the table's primary key
    columns: tuple[str, ...] | None = None  # None → the first row's fields (every row must have them)
    version_column: str | None = None       # upsert: only a strictly newer version replaces a row
    skip_unchanged: bool = True             # upsert without version: skip identical updates
    max_batch_rows: int = 1000              # flush when this many distinct keys are buffered
    max_dwell_ms: int = 100                 # ... or when the oldest buffered row is this old
    max_retries: int = 6                    # lost connections / lock conflicts retried before giving up
    backoff_initial_ms: int = 250           # first retry delay; doubles, with jitter
    backoff_max_ms: int = 5000              # cap of one retry delay
# --8<-- [end:sink_settings]

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.table, str) or not self.table or "\x00" in self.table:
            raise ValueError(f"table must be a non-empty name, got {self.table!r}")
        if self.schema is None:
            schema, table = split_table_name(self.table)
            object.__setattr__(self, "schema", schema)
            object.__setattr__(self, "table", table)
        for name in ("key_columns", "columns"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(f"{name} must be a tuple of column names, not the string {value!r}")
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if self.version_column and self.mode != "upsert":
            raise ValueError("version_column only applies to mode='upsert'")
        if self.max_batch_rows < 1:
            raise ValueError("max_batch_rows must be at least 1")
        if self.max_dwell_ms < 0:
            raise ValueError("max_dwell_ms must not be negative (0 disables time-based flushes)")
        if self.max_retries < 0 or self.backoff_initial_ms < 0 or self.backoff_max_ms < 0:
            raise ValueError("retry settings must not be negative")


class PostgresForeachWriter:
    """A picklable ``foreach`` writer: ``PostgresForeachWriter(connection, SinkSettings(table=...))``.

    ``connection``: :class:`ConnectionSettings` or a DSN string. Only these two
    travel to the executors; a fresh copy is opened per task.
    """

    def __init__(self, connection: ConnectionSettings | str, settings: SinkSettings):
        if not isinstance(settings, SinkSettings):
            raise TypeError(f"settings must be a SinkSettings, not {type(settings).__name__}")
        self.connection = as_connection_settings(connection)
        self.settings = settings
        self._reset_runtime()

    # -- pickling: only the configuration travels to executors --------------
    def __getstate__(self) -> dict[str, Any]:
        return {"connection": self.connection, "settings": self.settings}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.connection = state["connection"]
        self.settings = state["settings"]
        self._reset_runtime()

    def __repr__(self) -> str:
        return f"PostgresForeachWriter(connection={self.connection!r}, settings={self.settings!r})"

    __str__ = __repr__

    def _reset_runtime(self) -> None:
        self._state = "new"  # "new" → "open" → "closed" (→ "open" again)
        self._target: PostgresTarget | None = None
        self._layout: RowLayout | None = None
        self._flusher: Flusher | None = None
        self.partition_id: int | None = None
        self.epoch_id: int | None = None
        self.metrics = SinkMetrics()

    # -- the foreach contract ---------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Connect (with retries) and read the table's columns; raise on failure, never return False.

        Returning False would make Spark drop this partition's rows without an error.
        """
        if self._state == "open":
            raise SinkError(f"open({partition_id}, {epoch_id}) called while partition {self.partition_id} "
                            f"epoch {self.epoch_id} is still open: call close() first (its rows are kept)")
        self._reset_runtime()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        target = PostgresTarget(self.connection, self.settings, self.metrics)
        target.open()
        self._target, self._state = target, "open"
        return True

    def process(self, row: Any) -> None:
        """Buffer one row (one per key); the flusher thread writes full and old buffers."""
        flusher = self._flusher or self._start(row)
        flusher.add(self._layout.values(row))
        self.metrics.rows_received += 1

    def close(self, error: BaseException | None = None) -> None:
        """On success write what is left and raise any error; with an error drop what is unwritten.

        Closing a writer that is not open (twice, or before ``open()``) does nothing.
        """
        if self._state != "open":
            return
        self._state = "closed"
        flusher, self._flusher = self._flusher, None
        try:
            if flusher is not None and error is None:
                flusher.finish()
            elif flusher is not None:
                flusher.abort()
        finally:
            if self._target is not None:
                self._target.close()
            if flusher is not None:
                self.metrics.rows_deduplicated = flusher.buffer.deduplicated
            log.info("postgres sink closed (partition=%s epoch=%s error=%s): %s", self.partition_id,
                     self.epoch_id, type(error).__name__ if error else None, self.metrics.snapshot())

    def _start(self, row: Any) -> Flusher:
        """On the first row: fix the columns, build the statement, start the flusher thread."""
        if self._state != "open":
            raise SinkError(f"process() called on a writer that is {'closed' if self._state == 'closed' else 'not open'}"
                            ": call open() first; the row was not written")
        s, target = self.settings, self._target
        layout = RowLayout.for_first_row(row, s.columns, target.key_columns)
        target.prepare(layout.columns)
        buffer = RowBuffer(layout.columns, target.key_columns if s.mode != "append" else (),
                           s.version_column, first_wins=s.mode == "insert_ignore")
        self._layout = layout
        self._flusher = Flusher(buffer, target.write, s.max_batch_rows, s.max_dwell_ms,
                                name=f"pg-sink-flusher-p{self.partition_id}")
        return self._flusher


# --8<-- [start:start_query]
def start_upsert_query(events, dsn: str, table: str, checkpoint: str, real_time: bool = True):
    """Stream ``events`` into ``table`` with the idempotent upsert writer."""
    writer = PostgresForeachWriter(
        dsn,  # or ConnectionSettings(host=..., password=Secret(...)) / password_provider=...
        SinkSettings(table=table, key_columns=("id",), version_column="version",
                     max_batch_rows=1000, max_dwell_ms=100),
    )
    stream = (events.writeStream.foreach(writer)
              .outputMode("update")
              .option("checkpointLocation", checkpoint))
    if real_time:
        # 5 s is the open-source minimum and keeps tests short; production uses minutes
        # (references/trigger-and-cost-optimization.md, "Trigger length").
        stream = stream.trigger(realTime="5 seconds")
    else:
        stream = stream.trigger(processingTime="0 seconds")
    return stream.start()
# --8<-- [end:start_query]


__all__ = ["BadRowError", "ConnectionSettings", "MODES", "PostgresForeachWriter", "SinkConnectionError",
           "SinkError", "SinkMode", "SinkSettings", "start_upsert_query"]
