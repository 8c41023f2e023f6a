"""High-throughput, idempotent foreach writer for ``events`` (newest version wins).

    from solution import EventsWriter
    query = (events.writeStream
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")                  # real-time mode accepts update only
             .option("checkpointLocation", ckpt)
             .trigger(realTime="5 minutes")         # checkpoint interval, not a latency
             .start())

How it reaches bulk-load speed
------------------------------
* **One statement per batch, not per row.**  Rows are buffered (one per id,
  highest version kept) and written ``max_batch_rows`` (default 5,000) at a time
  as a single ``INSERT ... SELECT ... FROM unnest($1::text[], $2::bigint[],
  $3::text[]) ON CONFLICT (id) DO UPDATE ... WHERE t.version < EXCLUDED.version``:
  one round trip, one plan, one transaction, one WAL flush per batch.  The
  three arrays are sent in **binary**, so the server parses nothing per value.
  (The skill's benchmark: this shape reached ~0.7-0.8x of a raw ``COPY`` into the
  same keyed table, ~2x psycopg's pipelined ``executemany`` and >100x row-at-a-time.)
* **Writing overlaps reading.**  A flusher thread writes full batches while
  ``process()`` keeps buffering the next one; at most one full batch waits
  behind the one being written (back-pressure, bounded memory).
* **Newest version wins and replays are harmless.**  Inside a batch the highest
  version per id is kept; in the table a row is replaced only by a strictly
  newer version (``t.version IS NULL OR t.version < EXCLUDED.version``), so
  Spark's at-least-once replays and out-of-order rows never regress a row and
  an equal-version replay writes no new tuple.
* **No deadlocks between tasks.**  Each batch is sorted by id, so concurrent
  tasks lock shared ids in the same order.
* **One connection per task, kept per Python worker** for the worker's next
  task (the next epoch), so epochs do not pay a new login (validated before
  reuse; a failed task's connection is closed).

Real-time mode: ``open()``/``close()`` run once per long batch, so the buffer
is also flushed when its oldest row is ``max_dwell_ms`` old (default 100 ms),
not only when full or at ``close()``.  ``open()`` returns ``True`` or raises,
never ``False`` (Spark would drop the partition's rows silently).  Connection
losses, deadlocks and serialization failures are retried with jittered
backoff; anything else fails the task with the table and Postgres' reason.
SQL is composed with ``psycopg.sql`` identifiers and bound parameters only.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import random
import threading
import time
from collections import deque
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("events_writer")

_RETRY_SQLSTATES = ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300")

_COLUMNS_QUERY = """
SELECT a.attname, format_type(COALESCE(NULLIF(t.typbasetype, 0), a.atttypid), -1),
       a.attnum = ANY (COALESCE(i.indkey::int2[], '{}'))
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


class SinkError(RuntimeError):
    pass


class _WorkerConnection:
    """The one connection this Python worker process keeps between its tasks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # key -> (conn, opened at, idle since, idle timeout, max age)
        self.idle: dict[str, tuple[psycopg.Connection, float, float, float, float]] = {}
        self.opened_at: dict[int, float] = {}
        self.reaper: threading.Thread | None = None
        self.logins = 0

    def take(self, key: str, max_age_s: float) -> psycopg.Connection | None:
        with self.lock:
            item = self.idle.pop(key, None)
        if item is None:
            return None
        conn, opened = item[0], item[1]
        if max_age_s <= 0 or time.monotonic() - opened > max_age_s or not _alive(conn):
            _quiet_close(conn)
            return None
        return conn

    def give_back(self, key: str, conn: psycopg.Connection, max_age_s: float, idle_timeout_s: float) -> None:
        opened = self.opened_at.get(id(conn))
        if (max_age_s <= 0 or opened is None or conn.closed
                or time.monotonic() - opened > max_age_s
                or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            self.forget(conn)
            return
        with self.lock:
            previous = self.idle.pop(key, None)
            self.idle[key] = (conn, opened, time.monotonic(), idle_timeout_s, max_age_s)
            if self.reaper is None or not self.reaper.is_alive():
                self.reaper = threading.Thread(target=self._reap, name="events-sink-reaper", daemon=True)
                self.reaper.start()
        if previous is not None and previous[0] is not conn:
            self.forget(previous[0])  # never keep two

    def opened(self, conn: psycopg.Connection) -> None:
        with self.lock:
            self.opened_at[id(conn)] = time.monotonic()
            self.logins += 1

    def forget(self, conn: psycopg.Connection) -> None:
        with self.lock:
            self.opened_at.pop(id(conn), None)
        _quiet_close(conn)

    def _reap(self) -> None:
        while True:
            time.sleep(0.5)
            now = time.monotonic()
            with self.lock:
                stale = [k for k, (_, opened, since, idle_s, age_s) in self.idle.items()
                         if now - since > idle_s or now - opened > age_s]
                items = [self.idle.pop(k) for k in stale]
            for item in items:
                self.forget(item[0])

    def close_all(self) -> None:
        with self.lock:
            items = list(self.idle.values())
            self.idle.clear()
        for item in items:
            _quiet_close(item[0])

    def forget_inherited(self) -> None:  # in a forked child: the parent's sessions are not ours
        self.lock = threading.Lock()
        self.idle, self.opened_at, self.reaper = {}, {}, None


def _quiet_close(conn: psycopg.Connection) -> None:
    try:
        conn.close()
    except Exception:  # closing a broken connection must not hide the real error
        log.debug("ignoring error while closing", exc_info=True)


def _alive(conn: psycopg.Connection) -> bool:
    if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        return False
    try:
        with conn.cursor() as cur:
            cur.execute("SET LOCAL statement_timeout = 2000")
            cur.execute("SELECT 1")
        conn.rollback()
        return True
    except psycopg.Error:
        return False


_WORKER = _WorkerConnection()
atexit.register(_WORKER.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WORKER.forget_inherited)




def _split(table: str) -> tuple[str | None, str]:
    parts = table.split(".")
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class EventsWriter:
    """PySpark ``foreach`` writer: batched ``unnest`` upsert, newest ``version`` per ``id`` wins."""

    _SETTINGS = ("dsn", "schema", "table", "key_column", "version_column", "max_batch_rows",
                 "max_dwell_ms", "max_retries", "backoff_initial_ms", "backoff_max_ms",
                 "connect_timeout_s", "connection_max_age_s", "idle_timeout_s", "application_name")

    def __init__(self, dsn: str, table: str = "events", *, key_column: str = "id",
                 version_column: str = "version", max_batch_rows: int = 5000,
                 max_dwell_ms: int = 100, max_retries: int = 6, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, connect_timeout_s: int = 10,
                 connection_max_age_s: float = 1800, idle_timeout_s: float = 60,
                 application_name: str = "events-foreach-sink"):
        if not dsn:
            raise ValueError("dsn is required")
        if max_batch_rows < 1 or max_dwell_ms < 0:
            raise ValueError("max_batch_rows must be >= 1 and max_dwell_ms >= 0")
        self.dsn = dsn
        self.schema, self.table = _split(table)
        self.key_column, self.version_column = key_column, version_column
        self.max_batch_rows, self.max_dwell_ms = int(max_batch_rows), int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        self.connect_timeout_s = int(connect_timeout_s)
        self.connection_max_age_s, self.idle_timeout_s = float(connection_max_age_s), float(idle_timeout_s)
        self.application_name = application_name
        self._reset()

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._cond: threading.Condition | None = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._queue: deque = deque()
        self._writing = False
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self._cols: list[str] = []
        self._types: dict[str, str] = {}
        self._statement = None
        self._opened = False
        self.rows_received = 0
        self.rows_flushed = 0
        self.flushes = 0
        self.flush_seconds = 0.0

    def __getstate__(self):  # only settings travel to executors
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __repr__(self):  # the DSN may hold a password
        return f"EventsWriter(table={self._name()!r})"

    def _name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table) if self.schema else sql.Identifier(self.table)

    # -- foreach contract ---------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called while already open")
        self._conn = _WORKER.take(self._pool_key(), self.connection_max_age_s) or self._connect()
        try:
            self._load_types()
        except BaseException:
            self._close_conn()  # Spark calls no close() when open() raises
            raise
        self._cond = threading.Condition()
        self._buffer, self._oldest, self._queue, self._error = {}, None, deque(), None
        self._closing, self._writing = False, False
        self._thread = threading.Thread(target=self._flusher, name="events-flusher", daemon=True)
        self._thread.start()
        self._opened = True
        return True

    def process(self, row) -> None:
        if not self._opened:
            raise SinkError("process() called before open() or after close()")
        if not self._cols:
            self._first_row(row)
        if getattr(row, "__fields__", None) == self._cols:
            values = tuple(row)         # a Spark Row in column order: no per-field lookups
        else:
            try:                        # fields matched by name, whatever their order
                values = tuple(row[c] for c in self._cols)
            except (KeyError, ValueError, IndexError):
                raise SinkError(f"row {row!r} lacks one of the columns {self._cols}") from None
        key = values[self._ki]
        if key is None:
            raise SinkError(f"row with a null {self.key_column}")
        version = values[self._vi]
        cond = self._cond
        with cond:
            if self._error is not None:
                raise self._error
            held = self._buffer.get(key)
            # newest version wins inside a batch; a null version never displaces a row
            if held is None or (version is not None and (held[self._vi] is None or version > held[self._vi])):
                self._buffer[key] = values
            self.rows_received += 1
            if self._oldest is None:
                self._oldest = time.monotonic()
                cond.notify_all()  # start the dwell clock in the flusher
            if len(self._buffer) >= self.max_batch_rows:
                while len(self._queue) >= 1 and self._error is None:  # back-pressure: one batch waits
                    cond.wait()
                if self._error is not None:
                    raise self._error
                self._hand_over()

    def close(self, error) -> None:
        if not self._opened:
            return
        self._opened = False
        ok = False
        try:
            cond = self._cond
            with cond:
                if error is None and self._error is None and self._buffer:
                    self._hand_over()
                if error is not None:
                    self._queue.clear()   # the task failed: Spark replays the epoch
                    self._buffer.clear()
                self._closing = True
                cond.notify_all()
            self._thread.join()
            if error is None and self._error is not None:
                raise self._error
            ok = error is None
        finally:
            if ok:
                conn, self._conn = self._conn, None
                _WORKER.give_back(self._pool_key(), conn, self.connection_max_age_s, self.idle_timeout_s)
            else:
                self._close_conn()  # a failed task's connection is never kept
            log.info("events sink: %d rows received, %d written in %d flushes (%.3f s writing)",
                     self.rows_received, self.rows_flushed, self.flushes, self.flush_seconds)

    # -- buffering -----------------------------------------------------------------------
    def _first_row(self, row) -> None:
        fields = list(row.asDict()) if hasattr(row, "asDict") else list(row)
        unknown = [f for f in fields if f not in self._types]
        if unknown:
            raise SinkError(f"row fields {unknown} are not columns of {self._name()}")
        for needed in (self.key_column, self.version_column):
            if needed not in fields:
                raise SinkError(f"rows have no field {needed!r}")
        self._cols = fields
        self._ki, self._vi = fields.index(self.key_column), fields.index(self.version_column)
        self._statement = self._build_statement()

    def _hand_over(self) -> None:  # with the condition held
        if not self._buffer:  # the dwell timer may have taken it while process() waited
            return
        self._queue.append(self._buffer)
        self._buffer, self._oldest = {}, None
        self._cond.notify_all()

    def _flusher(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while True:
                    if self._queue or self._error is not None:
                        break
                    if self._closing:
                        return
                    if self._buffer and self.max_dwell_ms > 0:
                        left = self.max_dwell_ms / 1000.0 - (time.monotonic() - self._oldest)
                        if left <= 0:
                            self._hand_over()  # dwell: flush even if no further row comes
                            break
                        cond.wait(left)
                    else:
                        cond.wait()
                if self._error is not None:
                    return
                batch = self._queue.popleft()
                self._writing = True
            try:
                self._write(batch)
            except BaseException as exc:
                log.error("events sink: flush to %s failed: %s", self._name(), exc)
                with cond:
                    self._error = exc
                    self._queue.clear()
                    cond.notify_all()
                return
            finally:
                with cond:
                    self._writing = False
                    cond.notify_all()

    # -- writing -------------------------------------------------------------------------
    def _load_types(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute(_COLUMNS_QUERY, [self._target().as_string(self._conn)])
            found = cur.fetchall()
        self._conn.rollback()
        if not found:
            raise SinkError(f"table {self._name()} does not exist")
        self._types = {name: cast for name, cast, _ in found}

    def _build_statement(self) -> sql.Composed:
        n = len(self._cols)
        arrays = sql.SQL(", ").join(
            sql.SQL("{}::{}[]").format(sql.Placeholder(format="b"), sql.SQL(_array_base(self._types[c])))
            for c in self._cols)
        names = sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(n))
        select = sql.SQL(", ").join(
            sql.SQL("u.{}::{}").format(sql.Identifier(f"c{i}"), sql.SQL(self._types[c]))
            for i, c in enumerate(self._cols))
        updates = [c for c in self._cols if c != self.key_column]
        stmt = sql.SQL("INSERT INTO {t} AS t ({cols}) SELECT {select} FROM unnest({arrays}) AS u({names}) "
                       "ON CONFLICT ({key}) ").format(
            t=self._target(), cols=sql.SQL(", ").join(sql.Identifier(c) for c in self._cols),
            select=select, arrays=arrays, names=names, key=sql.Identifier(self.key_column))
        if not updates:
            return stmt + sql.SQL("DO NOTHING")
        return stmt + sql.SQL("DO UPDATE SET {sets} WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
            sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
            v=sql.Identifier(self.version_column))

    def _write(self, batch: dict) -> None:
        keys = sorted(batch, key=lambda k: (k is None, k))
        rows = [batch[k] for k in keys]
        params = [list(col) for col in zip(*rows)]
        started = time.perf_counter()
        for attempt in range(self.max_retries + 1):
            try:
                with self._conn.cursor(binary=True) as cur:
                    cur.execute(self._statement, params, binary=True)
                self._conn.commit()
                self.rows_flushed += len(rows)
                self.flushes += 1
                self.flush_seconds += time.perf_counter() - started
                return
            except psycopg.Error as exc:
                try:
                    self._conn.rollback()
                except psycopg.Error:
                    pass
                state = exc.sqlstate or ""
                transient = (isinstance(exc, psycopg.OperationalError) or state in _RETRY_SQLSTATES
                             or state.startswith("08"))
                if not transient or attempt == self.max_retries:
                    raise SinkError(f"flush of {len(rows)} rows to {self._name()} failed: "
                                    f"{_first_line(exc)}{f' [SQLSTATE {state}]' if state else ''}") from None
                log.warning("events sink: retry %d after %s", attempt + 1, _first_line(exc))
                self._sleep(attempt)
                if self._conn.closed or self._conn.broken:
                    self._close_conn()
                    self._conn = self._connect()

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection:
        for attempt in range(self.max_retries + 1):
            try:
                conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                       application_name=self.application_name, keepalives=1,
                                       keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
                _WORKER.opened(conn)
                return conn
            except psycopg.OperationalError as exc:
                text = str(exc).lower()
                permanent = ("authentication" in text or "does not exist" in text
                             or "permission denied" in text) and "too many" not in text
                if permanent or attempt == self.max_retries:
                    raise SinkError(f"cannot connect to Postgres for {self._name()}: {_first_line(exc)}") from None
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _WORKER.forget(conn)

    def _pool_key(self) -> str:  # a hash: no key holds the DSN's password
        return hashlib.sha256(f"{self.dsn}\0{self.application_name}".encode()).hexdigest()

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * 2 ** attempt, self.backoff_max_ms)
        time.sleep(delay * random.uniform(0.5, 1.0) / 1000.0)


def _array_base(cast_type: str) -> str:
    """The element type each column's values travel in (arrays of arrays would be flattened by unnest)."""
    return "text" if cast_type.endswith("[]") else cast_type
