"""High-throughput, idempotent foreach writer for ``events`` (id text PK, version bigint, payload text).

Usage (real-time mode, PySpark)::

    from solution import EventsWriter

    query = (df.writeStream
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")                    # real-time mode accepts only "update"
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")           # checkpoint interval, not a latency target
             .start())

Why it writes at bulk-load speed, not a row at a time
----------------------------------------------------
* Rows are buffered (one per id: the highest version wins, the first on a tie)
  and written ``max_batch_rows`` (default 5,000) at a time as ONE statement:
  ``INSERT ... SELECT ... FROM unnest(ids::text[], versions::bigint[],
  payloads::text[]) ... ON CONFLICT (id) DO UPDATE ... WHERE t.version <
  EXCLUDED.version``, with one array parameter per column, sent in binary and
  prepared once. That is one round trip and one commit per 5,000 rows;
  30,000 events in an epoch are 6 statements. (The skill's benchmark, same
  statement shape: about 100,000 upserted rows/s on one connection, 0.7-0.8x a
  raw ``COPY`` into the same keyed table, against about 45,000 rows/s for a
  pipelined ``executemany`` and a few hundred for a commit per row.)
* The write happens on a flusher thread, so the Python worker keeps
  unpickling and buffering the next rows while Postgres writes the previous
  batch (at most one full batch waits behind the one being written:
  back-pressure instead of unbounded memory).
* Per-row work in ``process()`` is a tuple lookup by field position and a dict
  insert; no SQL, no I/O.

Correctness
-----------
* Delivery to ``foreach`` is at-least-once (a failed long batch is replayed):
  the version guard makes a replay, or an older version arriving late, a
  no-op; a stored row is replaced only by a strictly newer version.
* One statement never touches an id twice (buffer dedup), so no
  ``ON CONFLICT DO UPDATE command cannot affect row a second time``.
* Each flush is sorted by id, so concurrent tasks writing shared ids take
  their row locks in the same order (no deadlocks).
* Real-time mode calls ``open()``/``close()`` once per long batch, so the
  flusher also writes the buffer when its oldest row is ``max_dwell_ms`` old
  (default 100 ms), not only when it is full or at ``close()``.
* Errors are never swallowed: a failed flush (after bounded retries for lost
  connections, deadlocks and serialization failures) is raised by the next
  ``process()`` or by ``close()``; a row Postgres refuses is named by id.
  ``open()`` never returns ``False``.
"""

from __future__ import annotations

import logging
import math
import queue
import random
import threading
import time
from typing import Any

log = logging.getLogger("events_writer")

KEY, VERSION, PAYLOAD = "id", "version", "payload"
_NAMES = (KEY, VERSION, PAYLOAD)
_BAD_ROW_CLASSES = ("22", "23", "54")
_RETRY_CODES = ("40001", "40P01")
_STOP = object()


class EventsSinkError(RuntimeError):
    """A flush that cannot succeed (names the row's id when one row is the cause)."""


def _table_identifier(table: str):
    """``events``, ``schema.events`` or ``"Quoted"."Name"``, read as SQL reads it."""
    from psycopg import sql

    parts: list[str] = []
    rest = table.strip()
    while rest:
        if rest.startswith('"'):
            end, name = 1, []
            while True:
                nxt = rest.find('"', end)
                if nxt < 0:
                    raise ValueError(f"unterminated quoted identifier in table name {table!r}")
                name.append(rest[end:nxt])
                if rest[nxt + 1:nxt + 2] == '"':
                    name.append('"')
                    end = nxt + 2
                    continue
                rest = rest[nxt + 1:]
                break
            parts.append("".join(name))
        else:
            dot = rest.find(".")
            parts.append((rest if dot < 0 else rest[:dot]).strip().lower())
            rest = "" if dot < 0 else rest[dot:]
        rest = rest.strip()
        if rest.startswith("."):
            rest = rest[1:].strip()
            if not rest:
                raise ValueError(f"empty name part in table name {table!r}")
        elif rest:
            raise ValueError(f"cannot read table name {table!r}")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _upsert_sql(table: str):
    """One statement per batch: per-column arrays unnested into an upsert with a version guard."""
    from psycopg import sql

    i, v, p = (sql.Identifier(c) for c in _NAMES)
    return sql.SQL(
        "INSERT INTO {t} AS t ({i}, {v}, {p}) "
        "SELECT u.{i}, u.{v}, u.{p} FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS u({i}, {v}, {p}) "
        "ON CONFLICT ({i}) DO UPDATE SET {v} = EXCLUDED.{v}, {p} = EXCLUDED.{p} "
        "WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(t=_table_identifier(table), i=i, v=v, p=p)


def _row_sql(table: str):
    """The same upsert for one row (used only to name a row Postgres refuses)."""
    from psycopg import sql

    i, v, p = (sql.Identifier(c) for c in _NAMES)
    return sql.SQL(
        "INSERT INTO {t} AS t ({i}, {v}, {p}) VALUES (%s::text, %s::bigint, %s::text) "
        "ON CONFLICT ({i}) DO UPDATE SET {v} = EXCLUDED.{v}, {p} = EXCLUDED.{p} "
        "WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(t=_table_identifier(table), i=i, v=v, p=p)


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class EventsWriter:
    """PySpark ``foreach`` writer; ``EventsWriter(dsn, table)`` is the object to pass to ``foreach``."""

    _SETTINGS = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                 "backoff_initial_ms", "backoff_max_ms")

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 5000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        _table_identifier(table)  # a bad table name fails on the driver, before the query starts
        if max_batch_rows < 1 or max_dwell_ms < 1:
            raise ValueError("max_batch_rows and max_dwell_ms must be >= 1")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._reset()

    def _reset(self) -> None:
        self._conn = None
        self._sql = None
        self._row_sql = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._lock = None
        self._queue = None
        self._thread = None
        self._stopping = None
        self._error: BaseException | None = None
        self._opened = False
        self._positions = None
        self._fields = None
        self.rows_received = 0
        self.rows_flushed = 0
        self.flushes = 0

    def __getstate__(self) -> dict:  # only the settings travel to the executors
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- foreach contract --------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("EventsWriter.open() called twice without close()")
        self._sql = _upsert_sql(self.table)
        self._row_sql = _row_sql(self.table)
        self._connect_with_retries()
        self._lock = threading.Lock()
        self._queue = queue.Queue(maxsize=1)  # one full batch may wait behind the one being written
        self._stopping = threading.Event()
        self._buffer, self._oldest, self._error = {}, None, None
        self._opened = True
        self._thread = threading.Thread(target=self._flusher, name=f"events-flusher-{partition_id}", daemon=True)
        self._thread.start()
        return True  # never False: Spark would skip this partition's rows silently

    def process(self, row: Any) -> None:
        if not self._opened:
            raise RuntimeError("EventsWriter.process() called before open() or after close()")
        if self._error is not None:
            raise self._error
        key, version, payload = self._values(row)
        full = None
        with self._lock:
            old = self._buffer.get(key)
            if old is None:
                self._buffer[key] = (key, version, payload)
                if self._oldest is None:
                    self._oldest = time.monotonic()
                if len(self._buffer) >= self.max_batch_rows:
                    full, self._buffer, self._oldest = self._buffer, {}, None
            elif version is not None and (old[1] is None or version > old[1]):
                self._buffer[key] = (key, version, payload)
        self.rows_received += 1
        if full is not None:
            self._hand_over(full)

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._opened = False
        try:
            if error is None and self._error is None:
                with self._lock:
                    rest, self._buffer, self._oldest = self._buffer, {}, None
                if rest:
                    self._hand_over(rest)
            self._hand_over(_STOP)
            self._thread.join()
            if self._error is not None:
                raise self._error
        finally:
            self._buffer = {}
            self._stopping.set()  # whatever happened above, the flusher thread ends
            self._thread.join(timeout=60)
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None
            log.info("events sink: %d rows received, %d written in %d flushes",
                     self.rows_received, self.rows_flushed, self.flushes)

    # -- rows ----------------------------------------------------------------------------
    def _values(self, row: Any) -> tuple:
        fields = getattr(row, "__fields__", None)
        if fields is not None:  # a Spark Row: a tuple with field names; match by name once per layout
            if fields is not self._fields:
                try:
                    self._positions = tuple(fields.index(c) for c in _NAMES)
                except ValueError:
                    missing = [c for c in _NAMES if c not in fields]
                    raise EventsSinkError(f"row lacks column(s) {missing}; it has {list(fields)}") from None
                self._fields = fields
            i, v, p = self._positions
            key, version, payload = row[i], row[v], row[p]
        elif isinstance(row, dict):
            key, version, payload = row[KEY], row[VERSION], row[PAYLOAD]
        else:
            key, version, payload = row
        if key is None:
            raise EventsSinkError("row with a null id: the upsert key must be set")
        if version is not None and type(version) is not int:
            if isinstance(version, float) and not math.isnan(version) and version == int(version):
                version = int(version)
            else:
                raise EventsSinkError(f"row id={key!r}: version {version!r} is not an integer")
        return key, version, payload

    # -- flushing ------------------------------------------------------------------------
    def _hand_over(self, item: Any) -> None:
        """Give a batch (or the stop mark) to the flusher; waits while one batch is already waiting."""
        while True:
            if self._error is not None and item is not _STOP:
                raise self._error
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                if not self._thread.is_alive():
                    if self._error is not None:
                        raise self._error
                    raise EventsSinkError("the flusher thread stopped")

    def _flusher(self) -> None:
        wait = max(self.max_dwell_ms / 4000.0, 0.005)
        while True:
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                item = None
            if item is _STOP:
                return
            if self._error is not None:
                continue  # drain until told to stop; the error is raised in the task's thread
            try:
                if item is None:  # timer: write the buffer once its oldest row is old enough
                    with self._lock:
                        if self._oldest is None or (time.monotonic() - self._oldest) * 1000 < self.max_dwell_ms:
                            continue
                        item, self._buffer, self._oldest = self._buffer, {}, None
                self._write(item)
            except BaseException as exc:
                log.error("events sink: flush failed, nothing more is written: %s", _first_line(exc))
                self._error = exc

    def _connect(self) -> None:
        import psycopg

        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="events-foreach-sink")

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * (0.5 + random.random() / 2))

    def _connect_with_retries(self) -> None:
        import psycopg

        for attempt in range(self.max_retries + 1):
            try:
                self._connect()
                return
            except psycopg.OperationalError:
                if attempt == self.max_retries:
                    raise
                self._sleep(attempt)

    def _rollback(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            pass

    def _write(self, batch: dict) -> None:
        import psycopg

        if not batch:
            return
        keys = sorted(batch)  # one lock order for every task
        ids = keys
        versions = [batch[k][1] for k in keys]
        payloads = [batch[k][2] for k in keys]
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(self._sql, (ids, versions, payloads), prepare=True)
                self._conn.commit()
                self.rows_flushed += len(keys)
                self.flushes += 1
                return
            except Exception as exc:
                self._rollback()
                state = _sqlstate(exc) or ""
                if state[:2] in _BAD_ROW_CLASSES or state == "21000":
                    raise self._name_bad_row([batch[k] for k in keys], exc) from exc
                transient = isinstance(exc, psycopg.OperationalError) or state in _RETRY_CODES
                if not transient or attempt == self.max_retries:
                    raise
                log.warning("events sink: retry %d after %s", attempt + 1, _first_line(exc))
                self._sleep(attempt)

    def _name_bad_row(self, rows: list[tuple], exc: BaseException) -> EventsSinkError:
        """Replay row by row in a transaction that is always rolled back, to name the refused row."""
        try:
            with self._conn.cursor() as cur:
                for values in rows:
                    try:
                        cur.execute(self._row_sql, values)
                    except Exception as row_exc:
                        self._rollback()
                        return EventsSinkError(f"row id={values[0]!r} refused by Postgres: {_first_line(row_exc)}")
                    self._rollback()
        except Exception:
            self._rollback()
        return EventsSinkError(f"flush of {len(rows)} rows refused by Postgres: {_first_line(exc)}")
