"""What a writer writes and how: :class:`SinkSettings`, every knob of the Python foreach writer in one frozen dataclass.

Checked when built (mode, table name, key and column tuples, batch and retry
limits), so a wrong setting fails on the driver, before the query starts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from rtm_lakebase.sink.statements import split_table_name

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
    on_failure: Callable[[str], None] | None = None  # called once, on the executor, when a flush fails for good
                                            # (or is abandoned because the task failed first)
    connection_max_age_s: float = 1800      # a task's connection serves the next tasks of its Python
                                            # worker until this old; 0 → a new connection per task
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
        if self.on_failure is not None and not callable(self.on_failure):
            raise ValueError(f"on_failure must be a function of one str (the error), got {self.on_failure!r}")
        if not isinstance(self.connection_max_age_s, (int, float)) or isinstance(self.connection_max_age_s, bool) \
                or not 0 <= self.connection_max_age_s < float("inf"):
            raise ValueError("connection_max_age_s must be a number of seconds, at least 0 (0: no reuse)")
