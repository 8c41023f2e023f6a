"""Foreach writer for Postgres table ``events`` that holds at most one connection per running task.

``EventsWriter(dsn, table)`` returns a picklable PySpark ``foreach`` writer
(``open``/``process``/``close``) for a real-time (or micro-batch) query:
idempotent batched upserts where the newest ``version`` wins::

    INSERT INTO events AS t (id, version, payload) VALUES (...)
    ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
    WHERE t.version IS NULL OR t.version < EXCLUDED.version

Connection budget (the point of this writer)
--------------------------------------------
Spark runs a partition's tasks one after another in the same Python worker
process (``spark.python.worker.reuse``, on by default), and under real-time
mode ``open()``/``close()`` run once per epoch (long batch), i.e. every few
seconds. Each process therefore keeps **exactly one** connection slot:

* ``open()`` takes the connection the previous task of this process gave back
  (checked: outside any transaction, answers ``SELECT 1`` within 2 s), or opens
  one when there is none. A process runs one task at a time, so it holds at most
  one connection: with 6 tasks running, at most 6 connections, in every epoch,
  and no connect/TLS/login churn at each epoch boundary.
* ``close()`` of a task that ended well gives the connection back (at most one
  idle connection per process: a second one would be closed, never kept).
  ``close(error)`` of a failed task **closes** its connection (it may be broken
  or mid-transaction), so a retried task starts clean.
* A reconnect inside a task (lost connection, server restart) closes the old
  connection *before* opening the new one: never two at once.
* A kept connection older than ``connection_max_age_s`` (default 1800 s; keeps
  OAuth-token logins fresh on Lakebase) or idle longer than ``idle_timeout_s``
  (default 60 s: a worker the scheduler stopped using) is closed by a small
  sweeper thread; all are closed at process exit; a forked child forgets (does
  not close) the connections it inherited, which belong to its parent.
* ``max_connection_reuse=False`` gives the strict alternative: connect in
  ``open()``, close in ``close()``, every epoch.

The pool lives in one object per Python process (registered in ``sys.modules``),
so it is shared by every task of the process however Spark pickled the writer.

Everything else is what a real-time ``foreach`` sink needs: rows buffered one per
id (the highest version wins inside a buffer), flushed as one transaction sorted
by id (concurrent tasks lock rows in the same order: no deadlocks) when
``max_batch_rows`` ids are buffered or, from a timer thread, when the oldest row
is ``max_dwell_ms`` old (under real-time mode ``close()`` comes only at the end
of the long batch); bounded jittered retries for lost connections, restarts,
deadlocks and serialization failures; a bad row fails the task naming its id.
Delivery is at-least-once (replayed epochs); the version guard makes replays
harmless. ``open()`` raises on failure and never returns ``False``.

Budget check at deploy time: sink tasks (6) + tasks that may be re-run at once
+ app pools + ~10 reserved must stay under the Lakebase compute's
``max_connections``; for a hard server-side cap give the sink its own role with
``ALTER ROLE sink_writer CONNECTION LIMIT 6``.

Requires ``psycopg`` 3 on the executors.
"""

from __future__ import annotations

import atexit
import logging
import os
import random
import sys
import threading
import time
import types
from typing import Any, Optional

log = logging.getLogger("events_writer")

_RECONNECT_CODES = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}
_RETRY_CODES = {"40001", "40P01"}
_BAD_ROW_PREFIXES = ("22", "23", "54", "42804", "42846", "21000")


class SinkError(RuntimeError):
    def __init__(self, message: str, sqlstate: Optional[str] = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


def _sqlstate(exc: BaseException) -> Optional[str]:
    return getattr(exc, "sqlstate", None)


def _kind(exc: BaseException) -> str:
    import psycopg

    state = _sqlstate(exc)
    if state:
        if state.startswith("08") or state in _RECONNECT_CODES:
            return "reconnect"
        if state in _RETRY_CODES:
            return "retry"
        if state.startswith(_BAD_ROW_PREFIXES):
            return "bad_row"
        return "permanent"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return "reconnect"
    if isinstance(exc, (psycopg.DataError, TypeError, ValueError, OverflowError)):
        return "bad_row"
    return "permanent"


# ----------------------------------------------------------------------------------------------
# One connection slot per Python worker process
# ----------------------------------------------------------------------------------------------
class _ProcessConnectionSlot:
    """At most one idle connection per (process, dsn); taken by a task, given back when it ends well."""

    SWEEP_EVERY_S = 5.0

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.idle: dict = {}          # dsn -> (conn, opened_at, idle_since, max_age_s)
        self.opened_at: dict = {}     # id(conn) -> opened_at (monotonic)
        self.sweeper: Optional[threading.Thread] = None
        self.idle_timeout_s = 60.0

    def _check_fork(self):
        if os.getpid() != self.pid:  # forked child: the parent's sessions are not ours to close
            self.pid = os.getpid()
            self.lock = threading.Lock()
            self.idle = {}
            self.opened_at = {}
            self.sweeper = None

    def take(self, dsn: str, max_age_s: float):
        self._check_fork()
        with self.lock:
            item = self.idle.pop(dsn, None)
        if item is None:
            return None
        conn, opened_at, _idle_since, _age = item
        if max_age_s <= 0 or time.monotonic() - opened_at > max_age_s or not _alive(conn):
            _close(conn)
            return None
        return conn

    def give_back(self, dsn: str, conn, max_age_s: float, idle_timeout_s: float):
        self._check_fork()
        if conn is None:
            return
        opened_at = self.opened_at.get(id(conn))
        if opened_at is None or max_age_s <= 0 or conn.closed or time.monotonic() - opened_at > max_age_s:
            self.forget(conn)
            _close(conn)
            return
        try:
            from psycopg import pq

            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.rollback()
        except Exception:
            self.forget(conn)
            _close(conn)
            return
        self.idle_timeout_s = idle_timeout_s
        extra = None
        with self.lock:
            if dsn in self.idle:  # never keep a second one
                extra = conn
            else:
                self.idle[dsn] = (conn, opened_at, time.monotonic(), max_age_s)
                self._start_sweeper()
        if extra is not None:
            self.forget(extra)
            _close(extra)

    def opened(self, conn):
        self.opened_at[id(conn)] = time.monotonic()

    def forget(self, conn):
        self.opened_at.pop(id(conn), None)

    def _start_sweeper(self):  # lock held
        if self.sweeper is None or not self.sweeper.is_alive():
            self.sweeper = threading.Thread(target=self._sweep_forever, daemon=True, name="events-pg-sweeper")
            self.sweeper.start()

    def _sweep_forever(self):
        while True:
            time.sleep(self.SWEEP_EVERY_S)
            try:
                self.sweep()
            except Exception:
                log.debug("sweep failed", exc_info=True)

    def sweep(self):
        """Close idle connections past their age or idle too long (a worker no longer used)."""
        if os.getpid() != self.pid:
            return
        now = time.monotonic()
        stale = []
        with self.lock:
            for dsn, (conn, opened_at, idle_since, max_age_s) in list(self.idle.items()):
                if now - opened_at > max_age_s or now - idle_since > self.idle_timeout_s:
                    stale.append(conn)
                    del self.idle[dsn]
        for conn in stale:
            self.forget(conn)
            _close(conn)

    def close_all(self):
        if os.getpid() != self.pid:
            return
        with self.lock:
            items = list(self.idle.values())
            self.idle.clear()
        for conn, *_ in items:
            _close(conn)


def _close(conn):
    try:
        conn.close()
    except Exception:
        pass


def _alive(conn, timeout_s: float = 2.0) -> bool:
    """Outside a transaction and answering ``SELECT 1`` within ``timeout_s``."""
    try:
        from psycopg import pq

        if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        with conn.transaction():
            conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(int(timeout_s * 1000))])
            conn.execute("SELECT 1").fetchone()
        conn.commit()
        return conn.info.transaction_status == pq.TransactionStatus.IDLE
    except Exception:
        return False


def _process_slot() -> _ProcessConnectionSlot:
    """The one slot object of this process, whatever module object (or pickled copy) asks for it."""
    holder = sys.modules.get("_events_writer_connection_slot")
    if holder is None:
        holder = types.ModuleType("_events_writer_connection_slot")
        holder.SLOT = _ProcessConnectionSlot()
        sys.modules["_events_writer_connection_slot"] = holder
        atexit.register(holder.SLOT.close_all)
    return holder.SLOT


# ----------------------------------------------------------------------------------------------
# The writer
# ----------------------------------------------------------------------------------------------
class EventsWriter:
    """Picklable PySpark ``foreach`` writer for ``events``: newest version wins, one connection per task."""

    def __init__(self, dsn: str, table: str = "events", key_column: str = "id",
                 version_column: str = "version", max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 6, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                 connect_timeout_s: int = 10, connection_max_age_s: float = 1800.0,
                 idle_timeout_s: float = 60.0, max_connection_reuse: bool = True):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.key_column = key_column
        self.version_column = version_column
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = int(backoff_initial_ms)
        self.backoff_max_ms = int(backoff_max_ms)
        self.connect_timeout_s = int(connect_timeout_s)
        self.connection_max_age_s = float(connection_max_age_s) if max_connection_reuse else 0.0
        self.idle_timeout_s = float(idle_timeout_s)
        self._reset()

    _CONFIG = ("dsn", "table", "key_column", "version_column", "max_batch_rows", "max_dwell_ms",
               "max_retries", "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s",
               "connection_max_age_s", "idle_timeout_s")

    def __getstate__(self):
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._reset()

    def __repr__(self):
        return f"EventsWriter(table={self.table!r})"  # never the DSN (it may hold a password)

    def _reset(self):
        self._conn = None
        self._lock = threading.RLock()
        self._buffer: dict = {}
        self._oldest = None
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._timer: Optional[threading.Thread] = None
        self._columns: Optional[list] = None
        self._statement = None
        self._key_i = 0
        self._ver_i: Optional[int] = None
        self._open = False
        self.partition_id = self.epoch_id = None

    # ---- foreach contract -------------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        """Take this process's connection (or open it). Raises on failure; never returns False."""
        if self._open:
            raise SinkError("open() called while the writer is open; call close() first")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = _process_slot().take(self.dsn, self.connection_max_age_s)
        if self._conn is None:
            self._conn = self._connect_with_retries()
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name=f"events-flush-p{partition_id}")
            self._timer.start()
        return True

    def process(self, row):
        if not self._open:
            raise SinkError("process() called on a writer that is not open; the row was not written")
        self._raise_stored()
        values = self._values(row)
        key = values[self._key_i]
        if key is None:
            raise SinkError(f"row with a NULL {self.key_column} cannot be upserted")
        with self._lock:
            if not self._buffer:
                self._oldest = time.monotonic()
            kept = self._buffer.get(key)
            if kept is None or self._newer(values, kept):
                self._buffer[key] = values
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()
        self._raise_stored()

    def close(self, error):
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=120)
        ended_well = False
        try:
            if error is None:
                self._raise_stored()
                with self._lock:
                    self._flush_locked()
                self._raise_stored()
                ended_well = True
            else:
                with self._lock:  # Spark replays the epoch
                    self._buffer.clear()
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                if ended_well and self.connection_max_age_s > 0:
                    _process_slot().give_back(self.dsn, conn, self.connection_max_age_s, self.idle_timeout_s)
                else:
                    _process_slot().forget(conn)
                    _close(conn)

    # ---- internals --------------------------------------------------------------------------
    def _newer(self, values: tuple, kept: tuple) -> bool:
        """Inside one buffer the higher version wins; a NULL version never displaces a row."""
        if self._ver_i is None:
            return True
        new, old = values[self._ver_i], kept[self._ver_i]
        if new is None:
            return old is None
        return old is None or new > old

    def _raise_stored(self):
        if self._error is not None:
            raise self._error

    def _timer_loop(self):
        period = max(self.max_dwell_ms / 4000.0, 0.001)
        while not self._stop.wait(period):
            if self._error is not None:
                return
            with self._lock:
                if self._buffer and self._oldest is not None and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:
                        log.error("postgres sink: flush failed, nothing more is written: %s", exc)
                        self._error = exc
                        return

    def _connect_with_retries(self):
        import psycopg

        attempt = 0
        while True:
            try:
                conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                       application_name="spark-events-sink")
                _process_slot().opened(conn)
                return conn
            except Exception as exc:
                state = _sqlstate(exc)
                text = str(exc).lower()
                refused = (state or "").startswith("28") or state in ("3D000", "42501") or any(
                    s in text for s in ("password authentication failed", "no pg_hba.conf entry",
                                        "does not exist", "permission denied"))
                if refused or attempt >= self.max_retries:
                    raise SinkError(f"could not connect to Postgres after {attempt + 1} attempt(s): "
                                    f"{type(exc).__name__}: {exc}", state) from None
                self._sleep(attempt)
                attempt += 1

    def _sleep(self, attempt: int):
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * random.uniform(0.5, 1.0))

    def _values(self, row) -> tuple:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if self._columns is None:
            if self.key_column not in data:
                raise SinkError(f"rows must carry the key column {self.key_column!r}")
            self._columns = list(data)
            self._key_i = self._columns.index(self.key_column)
            self._ver_i = self._columns.index(self.version_column) if self.version_column in data else None
            self._statement = self._upsert_statement(self._columns)
        try:
            return tuple(data[c] for c in self._columns)
        except KeyError as exc:
            raise SinkError(f"row is missing column {exc.args[0]!r}") from None

    def _target(self):
        from psycopg import sql

        parts = self.table.split(".")
        if len(parts) == 2 and all(parts):
            return sql.Identifier(parts[0], parts[1])
        return sql.Identifier(self.table)

    def _upsert_statement(self, columns):
        from psycopg import sql

        updates = [c for c in columns if c != self.key_column]
        statement = sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({key}) ").format(
            t=self._target(), cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            vals=sql.SQL(", ").join(sql.Placeholder() for _ in columns), key=sql.Identifier(self.key_column))
        if not updates:
            return statement + sql.SQL("DO NOTHING")
        statement += sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)
        if self._ver_i is not None:
            statement += sql.SQL(" WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
                v=sql.Identifier(self.version_column))
        return statement

    def _flush_locked(self):
        if not self._buffer:
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._drop_connection()
                    self._conn = self._connect_with_retries()
                with self._conn.cursor() as cur:
                    cur.executemany(self._statement, rows)
                self._conn.commit()
                break
            except SinkError:
                raise
            except Exception as exc:
                self._rollback_quietly()
                kind = _kind(exc)
                if kind == "bad_row":
                    raise self._name_bad_row(rows, exc) from None
                if kind == "permanent" or attempt >= self.max_retries:
                    raise SinkError(f"flush of {len(rows)} row(s) to {self.table!r} failed after "
                                    f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}",
                                    _sqlstate(exc)) from None
                if kind == "reconnect":
                    self._drop_connection()  # close the old one before a new one is opened
                self._sleep(attempt)
                attempt += 1
        self._buffer.clear()
        self._oldest = None

    def _name_bad_row(self, rows, exc) -> SinkError:
        try:
            with self._conn.transaction(force_rollback=True):
                for r in rows:
                    try:
                        with self._conn.transaction():
                            self._conn.execute(self._statement, r)
                    except Exception as row_exc:
                        if _kind(row_exc) == "bad_row":
                            return SinkError(f"row with {self.key_column}={r[self._key_i]!r} rejected by "
                                             f"{self.table!r}: {row_exc} [SQLSTATE {_sqlstate(row_exc)}]; "
                                             "nothing of its flush was written", _sqlstate(row_exc))
                        raise
        except Exception:
            self._rollback_quietly()
        return SinkError(f"flush to {self.table!r} rejected: {type(exc).__name__}: {exc}", _sqlstate(exc))

    def _rollback_quietly(self):
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            self._drop_connection()

    def _drop_connection(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            _process_slot().forget(conn)
            _close(conn)


__all__ = ["EventsWriter", "SinkError"]
