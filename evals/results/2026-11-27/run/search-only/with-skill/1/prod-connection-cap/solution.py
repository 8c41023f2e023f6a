"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

Usage (real-time mode, PySpark)::

    from solution import EventsWriter

    query = (df.writeStream
             .foreach(EventsWriter(dsn, "events"))
             .outputMode("update")                    # real-time mode accepts only "update"
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")           # checkpoint interval, not a latency target
             .start())

Connection discipline (budget: 6 connections, 6 sink tasks at a time)
--------------------------------------------------------------------
* Exactly one connection per task: made in ``open()``, used by ``process()``
  and by the writer's flush timer under one lock (the timer never opens a
  connection of its own), and closed in ``close()`` on every path - success,
  error, a flush that raised - in a ``finally``. Nothing is kept idle in the
  Python worker between tasks, so across epochs the sink holds at most as many
  connections as tasks are running (6), never one per epoch.
* A reconnect after a lost connection closes the old one first, so a retry
  never holds two.
* Belt and braces: a Python worker runs one task at a time, so when ``open()``
  finds a connection of this module still open in the same process (a task
  whose ``close()`` never ran, e.g. ``open()`` failed after connecting), it
  closes it before connecting.
* If the worker process dies, the kernel closes its socket and Postgres ends
  the session; TCP keepalives (30 s idle, 10 s interval, 3 probes) let the
  server side notice a peer that vanished without a FIN.
* Trade-off: one login per task per epoch. Reusing connections across tasks
  in a Python worker would save that login but keeps idle connections that are
  not tied to a running task, which this budget forbids.
* ``open()`` never returns ``False`` (Spark would drop the partition's rows
  silently); it raises.

Newest version wins
-------------------
Delivery to ``foreach`` is at-least-once (a failed long batch is replayed), so
the flush is an idempotent upsert with a version guard::

    INSERT ... ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
    WHERE t.version IS NULL OR t.version < EXCLUDED.version

A replayed older or equal version never overwrites a newer row. Within one
flush the buffer keeps the highest version per id (first row on a tie), so one
statement never touches an id twice. Rows are flushed sorted by id, so
concurrent tasks lock shared ids in the same order (no deadlocks).

Real-time mode calls ``open()``/``close()`` once per long batch, so the buffer
is flushed from ``process()`` (``max_batch_rows`` distinct ids) and from the
timer (``max_dwell_ms``), not only in ``close()``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import weakref
from typing import Any

log = logging.getLogger("events_writer")

COLUMNS: tuple[tuple[str, str], ...] = (("id", "text"), ("version", "bigint"), ("payload", "text"))
KEY, VERSION = "id", "version"
_NAMES = tuple(c for c, _ in COLUMNS)

_BAD_ROW_CLASSES = ("22", "23", "54")
_RETRY_CODES = ("40001", "40P01")

#: Connections this module opened in this process and has not closed yet: id -> (connection, owner writer).
_OPEN_CONNECTIONS: dict[int, tuple[Any, weakref.ref]] = {}
_OPEN_LOCK = threading.Lock()


class EventsSinkError(RuntimeError):
    """A flush that cannot succeed; names the row's id when one row is the cause."""


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
    from psycopg import sql

    updates = [c for c in _NAMES if c != KEY]
    return sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({k}) DO UPDATE SET {sets} "
                   "WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
        t=_table_identifier(table),
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in _NAMES),
        vals=sql.SQL(", ").join(sql.SQL("%s::" + cast) for _, cast in COLUMNS),  # constant casts
        k=sql.Identifier(KEY),
        sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
        v=sql.Identifier(VERSION))


def _convert(row: Any) -> tuple:
    if hasattr(row, "asDict"):
        d = row.asDict(recursive=False)
    elif isinstance(row, dict):
        d = row
    elif isinstance(row, (tuple, list)) and len(row) == len(_NAMES):
        d = dict(zip(_NAMES, row))
    else:
        raise EventsSinkError(f"cannot read a row of type {type(row).__name__}")
    key = d.get(KEY)
    for c in _NAMES:
        if c not in d:
            raise EventsSinkError(f"row id={key!r}: column {c!r} is missing")
    if key is None:
        raise EventsSinkError("row with a null id: the upsert key must be set")
    version = d[VERSION]
    if isinstance(version, float) and math.isnan(version):
        raise EventsSinkError(f"row id={key!r}: version is NaN and cannot be ordered")
    if version is not None and (isinstance(version, bool) or not isinstance(version, (int, float))):
        raise EventsSinkError(f"row id={key!r}: version must be an integer, got {type(version).__name__}")
    if isinstance(version, float):
        if version != int(version):
            raise EventsSinkError(f"row id={key!r}: version {version!r} is not an integer")
        version = int(version)
    for c in ("id", "payload"):
        v = d[c]
        if v is not None and isinstance(v, str) and "\x00" in v:
            raise EventsSinkError(f"row id={key!r}: column {c!r} contains a NUL character")
    return (key, version, d["payload"])


def _newer(new: tuple, old: tuple) -> bool:
    """True when ``new`` should replace ``old`` in the buffer (strictly higher version; null never wins)."""
    if new[1] is None:
        return False
    return old[1] is None or new[1] > old[1]


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _close_quietly(conn) -> None:
    if conn is None:
        return
    try:
        conn.close()
    except Exception:
        pass
    with _OPEN_LOCK:
        entry = _OPEN_CONNECTIONS.get(id(conn))
        if entry is not None and entry[0] is conn:
            del _OPEN_CONNECTIONS[id(conn)]


class EventsWriter:
    """PySpark ``foreach`` writer; ``EventsWriter(dsn, table)`` is the object to pass to ``foreach``."""

    _SETTINGS = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                 "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s")

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                 connect_timeout_s: int = 10) -> None:
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
        self.connect_timeout_s = connect_timeout_s
        self._reset()

    def _reset(self) -> None:
        self._conn = None
        self._sql = None
        self._buffer: dict[Any, tuple] = {}
        self._oldest: float | None = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._error: BaseException | None = None
        self._opened = False

    def __getstate__(self) -> dict:  # only settings travel to the executors, never a connection
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- foreach contract --------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("EventsWriter.open() called twice without close()")
        self._close_stale_connections()
        self._sql = _upsert_sql(self.table)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._buffer, self._oldest, self._error = {}, None, None
        try:
            self._connect_with_retries()
            self._opened = True
            self._thread = threading.Thread(target=self._timer, name=f"events-flusher-{partition_id}",
                                            daemon=True)
            self._thread.start()
        except BaseException:
            self._opened = False
            self._disconnect()
            raise
        return True  # never False: Spark would skip this partition's rows silently

    def process(self, row: Any) -> None:
        if not self._opened:
            raise RuntimeError("EventsWriter.process() called before open() or after close()")
        self._raise_stored()
        values = _convert(row)
        with self._lock:
            self._raise_stored()
            old = self._buffer.get(values[0])
            if old is None or _newer(values, old):
                self._buffer[values[0]] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            self._disconnect()  # nothing may stay open, whatever happened before
            return
        self._opened = False
        try:
            self._stop.set()
            self._thread.join(timeout=120)
            if error is None and self._error is None:
                with self._lock:
                    self._flush_locked()
            self._raise_stored()
        finally:
            self._buffer = {}
            self._disconnect()  # always: no connection outlives its task

    # -- connection handling ---------------------------------------------------------------
    def _close_stale_connections(self) -> None:
        """A connection of ours whose writer is gone, closed, or no longer uses it is a leak: close it.
        (A Python worker runs one task at a time; writers open at the same time in one process are left alone.)"""
        with _OPEN_LOCK:
            stale = []
            for conn, owner_ref in list(_OPEN_CONNECTIONS.values()):
                owner = owner_ref()
                if owner is None or not owner._opened or owner._conn is not conn:
                    stale.append(conn)
        for conn in stale:
            log.warning("events sink: closing a connection left open by an earlier task in this worker")
            _close_quietly(conn)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        _close_quietly(conn)

    def _connect(self) -> None:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict

        self._disconnect()  # never two connections, not even during a reconnect
        given = conninfo_to_dict(self.dsn)
        extra: dict[str, Any] = {}
        defaults = {"application_name": "events-foreach-sink", "connect_timeout": self.connect_timeout_s,
                    "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
        for k, v in defaults.items():
            if k not in given:
                extra[k] = v
        conn = psycopg.connect(self.dsn, autocommit=False, **extra)
        with _OPEN_LOCK:
            _OPEN_CONNECTIONS[id(conn)] = (conn, weakref.ref(self))
        self._conn = conn

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * (0.5 + random.random() / 2))

    def _connect_with_retries(self) -> None:
        import psycopg

        for attempt in range(self.max_retries + 1):
            try:
                self._connect()
                return
            except psycopg.OperationalError as exc:
                self._disconnect()
                if attempt == self.max_retries or "authentication failed" in str(exc):
                    raise
                self._sleep(attempt)

    # -- flushing -----------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            try:
                with self._lock:
                    if self._error is None and self._oldest is not None and \
                            (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                        self._flush_locked()
            except BaseException as exc:  # raised by the next process() or close()
                log.error("events sink: flush failed: %s", _first_line(exc))
                self._error = exc
                return

    def _rollback(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            pass

    def _flush_locked(self) -> None:
        import psycopg

        if not self._buffer:
            self._oldest = None
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()  # replaces (never adds to) this task's one connection
                with self._conn.cursor() as cur:
                    cur.executemany(self._sql, rows)
                self._conn.commit()
                break
            except Exception as exc:
                self._rollback()
                state = _sqlstate(exc) or ""
                if state[:2] in _BAD_ROW_CLASSES:
                    raise self._name_bad_row(rows, exc) from exc
                transient = isinstance(exc, psycopg.OperationalError) or state in _RETRY_CODES
                if not transient or attempt == self.max_retries:
                    raise
                if isinstance(exc, psycopg.OperationalError):
                    self._disconnect()
                log.warning("events sink: retry %d after %s", attempt + 1, _first_line(exc))
                self._sleep(attempt)
        self._buffer = {}
        self._oldest = None

    def _name_bad_row(self, rows: list[tuple], exc: BaseException) -> EventsSinkError:
        """Replay row by row in a transaction that is always rolled back, to name the refused row."""
        try:
            with self._conn.cursor() as cur:
                for values in rows:
                    try:
                        cur.execute(self._sql, values)
                    except Exception as row_exc:
                        self._rollback()
                        return EventsSinkError(f"row id={values[0]!r} refused by Postgres: {_first_line(row_exc)}")
                    self._rollback()
        except Exception:
            self._rollback()
        return EventsSinkError(f"flush of {len(rows)} rows refused by Postgres: {_first_line(exc)}")
