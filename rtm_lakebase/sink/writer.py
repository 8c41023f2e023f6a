"""Production foreach writer for Lakebase/Postgres: idempotent batched upserts, dwell-time flushes, retries.

``PostgresForeachWriter(connection, SinkSettings(...))`` is a PySpark
``foreach`` writer (``open``/``process``/``close``) for real-time mode and
micro-batch queries. One connection per task, taken in ``open()`` from the Python
worker's pool (:mod:`~rtm_lakebase.postgres.pool`: a task that ended well gave it
back, else a new one) and given back by a ``close()`` without error; modes
``"upsert"`` (``INSERT … ON CONFLICT DO UPDATE`` from unnest arrays, skipping
no-op updates, optional version guard), ``"insert_ignore"`` (``ON CONFLICT DO
NOTHING``) and ``"append"`` (``COPY``). Its parts, one job each:

- :mod:`~rtm_lakebase.sink.rows` — rows matched to columns by name; values checked per flush;
- :mod:`~rtm_lakebase.sink.buffer` — one row per key, handed over sorted by key;
- :mod:`~rtm_lakebase.sink.flusher` — the thread that writes full and old buffers;
- :mod:`~rtm_lakebase.sink.interrupt` — in a Spark task, a failed flush raised in the worker at once;
- :mod:`~rtm_lakebase.sink.target` — connection, statement, one flush with retries;
- :mod:`~rtm_lakebase.sink.errors` and :mod:`~rtm_lakebase.sink.diagnosis` — what a
  failure is and which row caused it.

A bad row raises :class:`BadRowError` naming its key and column, and nothing of
its flush is written; the password never shows in ``repr``, logs or messages.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rtm_lakebase.postgres.connection import ConnectionSettings, as_connection_settings
from rtm_lakebase.sink.buffer import RowBuffer
from rtm_lakebase.sink.errors import SinkError
from rtm_lakebase.sink.flusher import Flusher
from rtm_lakebase.sink.interrupt import WorkerInterrupt
from rtm_lakebase.sink.metrics import SinkMetrics
from rtm_lakebase.sink.rows import RowLayout
from rtm_lakebase.sink.settings import SinkSettings
from rtm_lakebase.sink.target import PostgresTarget

log = logging.getLogger(__name__)


class PostgresForeachWriter:
    """A picklable ``foreach`` writer: ``PostgresForeachWriter(connection, SinkSettings(table=...))``.

    ``connection``: :class:`ConnectionSettings` or a DSN string. Only these two
    travel to the executors; each task connects there (or takes the connection an
    earlier task of its Python worker gave back).
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
        self._interrupt: WorkerInterrupt | None = None
        self._hook = self.settings.on_failure
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
        self._interrupt = WorkerInterrupt.install()  # in a Spark task: report a failed flush at once
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
        interrupt, self._interrupt = self._interrupt, None
        if interrupt is not None:
            interrupt.remove()
        ended_well = False
        try:
            if flusher is not None and error is None:
                flusher.finish()
            elif flusher is not None and flusher.abort():
                self._abandoned(error)
            ended_well = error is None
        finally:
            if self._target is not None:  # a failed task's connection is closed, a good one kept
                self._target.close(keep=ended_well)
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
        buffer = RowBuffer(target.columns, target.key_columns if s.mode != "append" else (),
                           target.version_column, first_wins=s.mode == "insert_ignore",
                           key_forms=target.key_forms())
        self._layout = layout
        self._flusher = Flusher(buffer, target.write, s.max_batch_rows, s.max_dwell_ms,
                                name=f"pg-sink-flusher-p{self.partition_id}",
                                on_failure=self._failed if self._interrupt or s.on_failure else None,
                                cancel=target.abandon)
        return self._flusher

    def _abandoned(self, error: BaseException) -> None:
        """The task failed while a flush ran: that flush was stopped unwritten. Say so, once."""
        what = f"{type(error).__name__}: {self._target.redact(error) if self._target else error}"
        message = (f"postgres sink: the task failed ({what}); the flush in flight to "
                   f"{self._target.description if self._target else '?'} was abandoned unwritten "
                   "(Spark replays its rows)")
        log.warning("%s", message)
        hook, self._hook = self._hook, None
        if hook is not None:
            try:
                hook(message)
            except Exception as exc:
                log.warning("postgres sink: on_failure raised %r", exc)

    def _failed(self, error: BaseException) -> None:
        """Called by the flusher thread once a flush failed for good, then every 0.5 s until close()."""
        hook, self._hook = self._hook, None
        if hook is not None:  # the user's watch, called once (see SinkSettings.on_failure)
            try:
                hook(str(error))
            except Exception as exc:
                log.warning("postgres sink: on_failure raised %r; the flush's error stands", exc)
        interrupt = self._interrupt
        if interrupt is not None:
            interrupt.fire(error)


__all__ = ["PostgresForeachWriter"]
