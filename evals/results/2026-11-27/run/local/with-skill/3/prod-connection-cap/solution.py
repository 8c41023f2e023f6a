"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

    from solution import EventsWriter
    query = (events.writeStream                       # 6 partitions in the writing stage
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")                    # real-time mode accepts update only
             .option("checkpointLocation", ckpt)
             .trigger(realTime="5 minutes")           # checkpoint interval, not a latency
             .start())

Connection discipline (the point of this writer)
-------------------------------------------------
Spark runs a partition's tasks one after another in the same Python worker
(``spark.python.worker.reuse``, on by default), and a worker runs one task at a
time.  So the writer keeps **at most one connection per Python worker process**:

* ``open()`` takes the worker's kept connection (checked: outside a
  transaction, answers ``SELECT 1`` within 2 s, younger than
  ``connection_max_age_s``), else connects once.  ``close()`` of a task that
  ended well hands it back for the worker's next task (the next epoch), so
  epochs do not log in again and no old session lingers beside a new one.
  Running tasks x 1 connection = 6, steady across epochs.
* A failed task's connection is closed, never kept; ``open()`` that fails after
  connecting closes it itself (Spark calls no ``close()`` then).
* The writer's flush thread uses the task's connection under a lock; it never
  opens a second one.  A lost connection is closed *before* a new one is
  opened (reconnect, then retry the flush).
* The kept connection is closed when it has been idle ``idle_timeout_s``
  (default 60 s; a worker that gets no more sink tasks gives it up), when it is
  ``connection_max_age_s`` old (default 30 min; fresh logins for rotating OAuth
  tokens), and at process exit.  ``connection_max_age_s=0`` turns reuse off
  (connect in ``open()``, close in ``close()``).
* A login refused with ``too many connections`` (SQLSTATE 53300; e.g. the sink
  role capped server-side with ``ALTER ROLE <sink role> CONNECTION LIMIT 6``,
  the recommended hard stop) is retried with backoff, so a re-run task waits
  for its predecessor's slot instead of failing.  TCP keepalives make a dead
  peer's session go away quickly.
* ``open()`` returns ``True`` or raises; never ``False`` (that drops the
  partition's rows silently).

Writes: newest version wins.  ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
t.version IS NULL OR t.version < EXCLUDED.version``; inside one flush the row
with the highest version per id is kept.  Replays (at-least-once delivery) and
out-of-order older versions are therefore harmless.  Each flush is one
statement (``unnest`` of per-column arrays), one transaction, rows sorted by id
so concurrent tasks lock shared ids in the same order (no deadlocks).
Real-time mode calls ``open()``/``close()`` once per long batch, so rows are
flushed from ``process()`` (``max_batch_rows``) and by a dwell timer
(``max_dwell_ms``), not only in ``close()``.  SQL is composed with
``psycopg.sql`` identifiers and bound parameters only.
"""
from __future__ import annotations

import atexit
import hashlib
import logging
import os
import random
import threading
import time
from typing import Any, Callable

import psycopg
from psycopg import sql

log = logging.getLogger("events_writer")

_RETRY_SQLSTATES = ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300")


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


class EventsWriter:
    """PySpark ``foreach`` writer: one connection per running task (kept per Python worker), newest ``version`` per ``id`` wins."""

    def __init__(self, dsn: str, table: str = "events", *, key_column: str = "id",
                 version_column: str = "version", max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 6, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, connect_timeout_s: int = 10,
                 connection_max_age_s: float = 1800, idle_timeout_s: float = 60,
                 application_name: str = "events-foreach-sink"):
        if not dsn:
            raise ValueError("dsn is required")
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

    _SETTINGS = ("dsn", "schema", "table", "key_column", "version_column", "max_batch_rows",
                 "max_dwell_ms", "max_retries", "backoff_initial_ms", "backoff_max_ms",
                 "connect_timeout_s", "connection_max_age_s", "idle_timeout_s", "application_name")

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock: threading.Lock | None = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop: threading.Event | None = None
        self._timer: threading.Thread | None = None
        self._cols: list[str] = []
        self._statement = None
        self._opened = False
        self.connections_opened = 0  # per task; a test can read it

    def __getstate__(self):  # only settings travel to executors; never a connection
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __repr__(self):  # the DSN may hold a password
        return f"EventsWriter(table={self._name()!r})"

    def _name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    # -- foreach contract -------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called while already open")
        self._conn = _WORKER.take(self._pool_key(), self.connection_max_age_s) or self._connect()
        try:
            self._check_table()
        except BaseException:
            self._close_conn()  # Spark calls no close() when open() raises
            raise
        self._lock = threading.Lock()
        self._buffer, self._oldest, self._error = {}, None, None
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="events-flush", daemon=True)
        self._timer.start()
        self._opened = True
        return True

    def process(self, row) -> None:
        if not self._opened:
            raise SinkError("process() called before open() or after close()")
        self._raise_stored()
        data = row.asDict() if hasattr(row, "asDict") else dict(row)
        if not self._cols:
            self._cols = list(data)
            for needed in (self.key_column, self.version_column):
                if needed not in self._cols:
                    raise SinkError(f"rows have no field {needed!r}")
            self._statement = self._build_statement()
        try:
            values = tuple(data[c] for c in self._cols)
        except KeyError as exc:
            raise SinkError(f"row with {self.key_column}={data.get(self.key_column)!r} "
                            f"has no field {exc.args[0]!r}") from None
        key = data[self.key_column]
        if key is None:
            raise SinkError(f"row with a null {self.key_column}")
        version = data[self.version_column]
        vi = self._cols.index(self.version_column)
        with self._lock:
            self._raise_stored()
            held = self._buffer.get(key)
            # newest version wins inside a flush too; a null version never displaces a row
            if held is None or (version is not None and (held[vi] is None or version > held[vi])):
                self._buffer[key] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_or_store()
                self._raise_stored()

    def close(self, error) -> None:
        if not self._opened:
            return
        self._opened = False
        try:
            self._stop.set()
            self._timer.join(timeout=60)
            if error is None:
                with self._lock:
                    if self._error is None and self._buffer:
                        self._flush_or_store()
                self._raise_stored()
            # with an error: unwritten rows are dropped here, Spark replays the epoch
        except BaseException:
            self._close_conn()  # a failed task's connection is never kept
            raise
        else:
            if error is None and self._error is None:
                conn, self._conn = self._conn, None
                _WORKER.give_back(self._pool_key(), conn, self.connection_max_age_s, self.idle_timeout_s)
            else:
                self._close_conn()

    # -- connection ----------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection:
        for attempt in range(self.max_retries + 1):
            try:
                conn = psycopg.connect(self.dsn, autocommit=False,
                                       connect_timeout=self.connect_timeout_s,
                                       application_name=self.application_name,
                                       keepalives=1, keepalives_idle=30,
                                       keepalives_interval=10, keepalives_count=3)
                self.connections_opened += 1
                _WORKER.opened(conn)
                return conn
            except psycopg.OperationalError as exc:
                text = str(exc).lower()
                too_many = (exc.sqlstate == "53300" or "too many" in text
                            or "connection limit" in text or "remaining connection slots" in text)
                if attempt == self.max_retries or (not too_many and (
                        "authentication" in text or "does not exist" in text
                        or "permission denied" in text)):
                    raise SinkError(f"cannot connect to Postgres for {self._name()}: "
                                    f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            _WORKER.forget(conn)

    def _pool_key(self) -> str:
        # a hash, so no key holds the DSN's password
        return hashlib.sha256(f"{self.dsn}\0{self.application_name}".encode()).hexdigest()

    def _reconnect(self) -> None:
        self._close_conn()          # first release the old one: never two at once
        self._conn = self._connect()

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * 2 ** attempt, self.backoff_max_ms)
        time.sleep(delay * random.uniform(0.5, 1.0) / 1000.0)

    # -- writing ---------------------------------------------------------------------------
    def _check_table(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s) IS NOT NULL",
                        [sql.Identifier(*( (self.schema, self.table) if self.schema else (self.table,)))
                         .as_string(self._conn)])
            (exists,) = cur.fetchone()
        self._conn.rollback()
        if not exists:
            raise SinkError(f"table {self._name()} does not exist")

    def _build_statement(self):
        target = sql.Identifier(self.schema, self.table) if self.schema else sql.Identifier(self.table)
        cols = [sql.Identifier(c) for c in self._cols]
        # per-column arrays, each cast to the column's own type (read from the catalog at run time)
        arrays = sql.SQL(", ").join(
            sql.SQL("{}::text[]").format(sql.Placeholder()) for _ in self._cols)
        updates = [c for c in self._cols if c != self.key_column]
        self._types = self._column_types()
        select = sql.SQL(", ").join(
            sql.SQL("u.{a}::{t}").format(a=sql.Identifier(f"c{i}"), t=sql.SQL(self._types[c]))
            for i, c in enumerate(self._cols))
        names = sql.SQL(", ").join(sql.Identifier(f"c{i}") for i in range(len(self._cols)))
        stmt = sql.SQL(
            "INSERT INTO {target} AS t ({cols}) SELECT {select} FROM unnest({arrays}) AS u({names}) "
            "ON CONFLICT ({key}) DO UPDATE SET {sets} "
            "WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
            target=target, cols=sql.SQL(", ").join(cols), select=select, arrays=arrays, names=names,
            key=sql.Identifier(self.key_column),
            sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                    for c in updates),
            v=sql.Identifier(self.version_column))
        return stmt

    def _column_types(self) -> dict[str, str]:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT a.attname, format_type(a.atttypid, -1) FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
                [sql.Identifier(*((self.schema, self.table) if self.schema else (self.table,)))
                 .as_string(self._conn)])
            found = dict(cur.fetchall())
        self._conn.rollback()
        missing = [c for c in self._cols if c not in found]
        if missing:
            raise SinkError(f"{self._name()} has no column(s) {missing}")
        return found

    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is None and self._buffer and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    self._flush_or_store()

    def _flush_or_store(self) -> None:
        try:
            self._flush()
        except BaseException as exc:
            log.error("events sink: flush failed: %s", exc)
            self._error = exc

    def _flush(self) -> None:
        keys = sorted(self._buffer)
        columns = list(zip(*(self._buffer[k] for k in keys)))
        # every value travels as text and is cast by Postgres to the column's type
        params = [[None if v is None else _text(v) for v in col] for col in columns]
        for attempt in range(self.max_retries + 1):
            try:
                with self._conn.cursor() as cur:
                    cur.execute(self._statement, params)
                self._conn.commit()
                self._buffer.clear()
                self._oldest = None
                return
            except psycopg.Error as exc:
                try:
                    self._conn.rollback()
                except psycopg.Error:
                    pass
                transient = (isinstance(exc, psycopg.OperationalError)
                             or (exc.sqlstate or "") in _RETRY_SQLSTATES
                             or (exc.sqlstate or "").startswith("08"))
                if not transient or attempt == self.max_retries:
                    raise SinkError(f"flush of {len(keys)} rows to {self._name()} failed: "
                                    f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                                    f" [SQLSTATE {exc.sqlstate}]") from None
                self._sleep(attempt)
                if self._conn.closed or self._conn.broken:
                    self._reconnect()


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray)):
        return "\\x" + bytes(value).hex()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
