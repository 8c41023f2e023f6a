"""High-throughput foreach writer for ``events``: set-based upserts from binary arrays.

``EventsWriter(dsn, table)`` is a PySpark ``foreach`` writer (``open`` / ``process`` /
``close``) for a real-time query::

    query = (events.writeStream
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")   # how often it checkpoints, not a latency
             .start())

Why it runs at bulk-load speed, not row by row
----------------------------------------------
* **One statement per batch.** ``max_batch_rows`` rows (default 5,000) become *three*
  array parameters sent in binary and expanded on the server::

      INSERT INTO events AS cur (id, version, payload)
      SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
      ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
      WHERE cur.version IS NULL OR cur.version < EXCLUDED.version

  That is one round trip, one parse/plan and one commit per batch. A 30,000-row burst
  is 6 statements, instead of 30,000 statements (one INSERT per row) or 30,000 pipelined
  statements (``executemany``). The skill pack measured this form at 0.72-0.81x a raw
  ``COPY`` into the same keyed table, against 0.28x for an ``executemany`` upsert and 0.08x
  for a row-at-a-time INSERT.
* **Writes overlap intake.** ``process()`` only puts the row in a dict. A flusher thread
  writes full batches while the next one fills (one batch may wait; after that,
  ``process()`` waits: back-pressure, bounded memory).
* **One row per id per batch.** Duplicates in a burst collapse in the buffer to the highest
  version, so Postgres never sees a key twice in one statement (``ON CONFLICT DO UPDATE``
  refuses that). Batches are sorted by id, so two tasks upserting the same ids lock them in
  the same order and do not deadlock.
* **No-op replays are cheap.** The version guard skips stale and equal-version rows (a
  replayed epoch after a failure: delivery is at-least-once) without writing a new tuple.

Correctness
-----------
The newest ``version`` wins: in the buffer and in the table. Stored rows with a NULL version
are replaced; a NULL-version row never replaces a versioned one. Each batch is its own
transaction, so a failure leaves whole batches. A lost connection is reconnected and the
batch retried (idempotent). Deadlocks and serialization failures are retried. Anything else
fails the task with the reason. A timer flushes a partial batch once its oldest row is
``max_dwell_ms`` old, because under real-time mode ``close()`` comes only at the end of a long
batch. ``open()`` never returns ``False``: it raises, so Spark cannot drop rows silently.
One connection per task, closed in ``close()``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from typing import Any

import psycopg
from psycopg import sql
from psycopg.adapt import PyFormat

log = logging.getLogger(__name__)


_IN_ORDER = (0, 1, 2)
_tuple_item = tuple.__getitem__  # a Spark Row is a tuple; skip Row.__getitem__'s Python-level name lookup


class EventsSinkError(RuntimeError):
    pass


def _split_table(table: str) -> sql.Identifier:
    """'events', 'schema.events' (folded to lower case as SQL does) or '"Schema"."Events"'."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty name, got {table!r}")
    names, buf, quoted, i = [], "", False, 0
    while i < len(table):
        c = table[i]
        if quoted:
            if c == '"' and table[i + 1:i + 2] == '"':
                buf, i = buf + '"', i + 1
            elif c == '"':
                quoted = False
            else:
                buf += c
        elif c == '"':
            quoted = True
        elif c == ".":
            names.append(buf)
            buf = ""
        else:
            buf += c.lower()
        i += 1
    names.append(buf)
    if quoted or len(names) > 2 or any(not n for n in names):
        raise ValueError(f"cannot read table name {table!r}")
    return sql.Identifier(*names)


def upsert_statement(table: str) -> sql.Composed:
    b = sql.Placeholder(format=PyFormat.BINARY)
    return sql.SQL(
        "INSERT INTO {t} AS cur (id, version, payload) "
        "SELECT * FROM unnest({b}::text[], {b}::bigint[], {b}::text[]) "
        "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
        "WHERE cur.version IS NULL OR cur.version < EXCLUDED.version").format(t=_split_table(table), b=b)


class EventsWriter:
    """``foreach`` writer: batched newest-version upserts into ``events`` (id, version, payload)."""

    def __init__(self, dsn: str, table: str = "events", max_batch_rows: int = 5000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000):
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("need max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms, self.max_retries = max_batch_rows, max_dwell_ms, max_retries
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        upsert_statement(table)  # a bad table name fails on the driver, before the query starts
        self._reset()

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms")

    def __getstate__(self) -> dict:  # only configuration travels to the executors
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"EventsWriter(table={self.table!r}, max_batch_rows={self.max_batch_rows})"

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._statement = upsert_statement(self.table)
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._queue: deque[dict[str, tuple]] = deque()  # sealed batches; [0] may be being written
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stopping = False
        self._writing = False
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._pick = None  # positions of id, version, payload in the row
        self._open = False
        self.rows_received = 0
        self.rows_written = 0
        self.flushes = 0

    # -- the foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._open:
            raise EventsSinkError("open() called twice without close()")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect()  # raises on failure; never returns False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"events-flusher-p{partition_id}")
        self._thread.start()
        self._open = True
        return True

    def process(self, row: Any) -> None:
        pick = self._pick
        if pick is None:
            pick = self._pick = self._positions(row)
        if pick is _IN_ORDER and len(row) == 3:  # a Row/tuple (id, version, payload): C-level unpacking
            rid, version, payload = row
        elif pick is True:  # a mapping
            rid, version, payload = row["id"], row["version"], row["payload"]
        else:
            rid, version, payload = _tuple_item(row, pick[0]), _tuple_item(row, pick[1]), _tuple_item(row, pick[2])
        if rid is None:
            raise EventsSinkError(f"row with a null id (version={version!r}) cannot be upserted")
        with self._lock:
            if self._error is not None:
                raise self._error
            buffer = self._buffer
            held = buffer.get(rid)
            if held is None:
                buffer[rid] = (rid, version, payload)
                if self._oldest is None:
                    self._oldest = time.monotonic()
                    self._cond.notify_all()  # start the dwell timer
                if len(buffer) >= self.max_batch_rows:
                    self._seal()
                    while len(self._queue) > 1 and self._error is None:  # back-pressure
                        self._cond.wait()
                    if self._error is not None:
                        raise self._error
            elif version is not None and (held[1] is None or version > held[1]):
                buffer[rid] = (rid, version, payload)  # newest version wins in the buffer
        self.rows_received += 1

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        try:
            with self._lock:
                if error is not None:  # the task failed: Spark replays the epoch
                    self._buffer.clear()
                    while len(self._queue) > (1 if self._writing else 0):
                        self._queue.pop()  # keep only the batch being written (it finishes or fails)
                else:
                    self._seal()
                self._stopping = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join()
            if error is None and self._error is not None:
                raise self._error
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            log.info("events sink closed (partition=%s epoch=%s): %d rows received, %d written in %d flushes",
                     getattr(self, "partition_id", None), getattr(self, "epoch_id", None),
                     self.rows_received, self.rows_written, self.flushes)

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _positions(row: Any):
        fields = getattr(row, "__fields__", None)
        if fields is not None:
            fields = list(fields)
            try:
                found = (fields.index("id"), fields.index("version"), fields.index("payload"))
                return _IN_ORDER if found == _IN_ORDER and len(fields) == 3 else found
            except ValueError:
                raise EventsSinkError(f"rows need fields id, version, payload; got {fields}") from None
        if hasattr(row, "keys"):
            return True
        return _IN_ORDER  # a plain (id, version, payload) tuple

    def _seal(self) -> None:
        """Hand the current buffer to the flusher thread (lock held)."""
        if self._buffer:
            self._queue.append(self._buffer)
            self._buffer = {}
            self._oldest = None
            self._cond.notify_all()

    def _run(self) -> None:
        """The flusher thread: write sealed batches in order; seal the buffer once it is too old."""
        dwell = self.max_dwell_ms / 1000
        while True:
            with self._lock:
                while not self._queue:
                    if self._stopping:
                        return
                    if dwell and self._oldest is not None:
                        wait = self._oldest + dwell - time.monotonic()
                        if wait <= 0:
                            self._seal()
                            continue
                        self._cond.wait(wait)
                    else:
                        self._cond.wait(0.5)
                batch = self._queue[0]
                self._writing = True
            try:
                self._write(batch)
                error = None
            except BaseException as exc:
                error = exc
                log.error("events sink: flush of %d rows failed; nothing more is written: %s", len(batch), exc)
            with self._lock:
                self._writing = False
                if self._queue and self._queue[0] is batch:
                    self._queue.popleft()
                if error is not None:
                    self._error = error
                    self._queue.clear()
                    self._buffer.clear()
                    self._cond.notify_all()
                    return
                self._cond.notify_all()

    def _write(self, batch: dict[str, tuple]) -> None:
        keys = sorted(batch)  # the same lock order in every task
        ids, versions, payloads = keys, [batch[k][1] for k in keys], [batch[k][2] for k in keys]
        params = (ids, versions, payloads)
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.transaction():
                    self._conn.execute(self._statement, params)
                self.rows_written += len(keys)
                self.flushes += 1
                return
            except (psycopg.OperationalError, psycopg.InterfaceError,
                    psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
                state = getattr(exc, "sqlstate", None)
                if attempt >= self.max_retries:
                    raise EventsSinkError(f"events sink: flush of {len(keys)} rows into {self.table} failed after "
                                          f"{attempt + 1} attempts: {type(exc).__name__} ({state}): {exc}") from None
                if state not in ("40001", "40P01") and self._conn is not None:
                    try:
                        self._conn.close()
                    except Exception:
                        pass
                    self._conn = None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
            except psycopg.Error as exc:
                raise EventsSinkError(f"events sink: flush of {len(keys)} rows into {self.table} refused "
                                      f"({getattr(exc, 'sqlstate', None)}): {exc}") from None

    def _connect(self) -> psycopg.Connection:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10,
                                       application_name="events-foreach-sink")
            except psycopg.OperationalError as exc:
                if attempt >= self.max_retries:
                    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise EventsSinkError(f"events sink: cannot connect after {attempt + 1} attempts: {first}") from None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
        raise AssertionError("unreachable")


__all__ = ["EventsWriter", "EventsSinkError", "upsert_statement"]
