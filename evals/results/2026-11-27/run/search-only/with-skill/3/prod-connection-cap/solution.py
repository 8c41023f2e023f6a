"""Foreach writer for ``events`` that holds at most one Postgres connection per running task.

Usage (PySpark real-time mode)::

    from solution import EventsWriter
    (df.writeStream
       .foreach(EventsWriter("host=... dbname=... user=... password=... sslmode=require", "events"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/events")
       .trigger(realTime="5 minutes")
       .start())

Connection discipline (the budget is 6 connections for 6 concurrently running tasks):

* A task opens exactly ONE connection, in ``open()``. ``process()``, the size flush
  and the dwell-timer flush (needed because under real-time mode ``close()`` only
  comes at the end of a long batch) all share that one connection under a lock:
  no second connection per thread, per flush or per row.
* ``close()`` always closes it, on success and on error (``finally``), so nothing
  is carried from one epoch to the next and no idle connection outlives its task;
  a worker that runs the partition's next epoch opens a fresh one after the old one
  is closed. Connections are not cached per Python worker: an idle cached connection
  would not belong to any running task, and a worker that ran another stage's task
  in the next epoch would push the total above 6.
* A lost connection is closed before the retry reconnects (never two at once);
  an ``open()`` that fails after connecting closes what it opened (Spark calls no
  ``close()`` then); the writer never returns False from ``open()``.

Newest version wins: a row replaces the stored row only when its ``version`` is
strictly greater (``WHERE t.version IS NULL OR t.version < EXCLUDED.version``), so
at-least-once replays of older or equal versions are harmless. Within a flush the
buffer keeps the highest version per id. Requires psycopg 3.
"""
from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["EventsWriter", "EventsForeachWriter", "SinkError"]

COLUMNS = ("id", "version", "payload")


class SinkError(RuntimeError):
    """A flush or connection that failed for good."""


class EventsForeachWriter:
    """Picklable PySpark ``foreach`` writer; one connection per task, closed in ``close()``."""

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_ms",
               "connect_timeout_s")

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_ms: int = 250, connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty connection string")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty table name")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms = max_batch_rows, max_dwell_ms
        self.max_retries, self.backoff_ms, self.connect_timeout_s = max_retries, backoff_ms, connect_timeout_s
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # never print the DSN: it may hold a password
        return f"EventsForeachWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn = None
        self._statement = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False

    # -- the one connection -----------------------------------------------------------
    def _connect(self) -> None:
        """Open the task's connection; any previous one is closed first (never two at once)."""
        import psycopg

        self._close_connection()
        self._conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                     application_name="events-foreach-sink")

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _build_statement(self):
        from psycopg import sql

        if "." in self.table and not self.table.startswith('"'):
            schema, _, name = self.table.partition(".")
            target = sql.Identifier(schema, name)
        else:
            target = sql.Identifier(self.table.strip('"'))
        return sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version").format(t=target)

    # -- rows ----------------------------------------------------------------------------
    @staticmethod
    def _values(row: Any) -> tuple:
        if hasattr(row, "asDict"):
            data = row.asDict(recursive=False)
        elif isinstance(row, dict):
            data = row
        else:
            data = dict(zip(COLUMNS, row))
        missing = [c for c in COLUMNS if c not in data]
        if missing:
            raise SinkError(f"row lacks field(s) {', '.join(missing)} (it has {sorted(data)})")
        values = (data["id"], data["version"], data["payload"])
        if values[0] is None:
            raise SinkError("row with a null id cannot be upserted (id is the primary key)")
        if values[1] is not None and (isinstance(values[1], bool) or not isinstance(values[1], int)):
            raise SinkError(f"row with id={values[0]!r}: version must be an integer, got {type(values[1]).__name__}")
        return values

    def _buffer_row(self, values: tuple) -> None:
        held = self._buffer.get(values[0])
        if held is not None:
            old, new = held[1], values[1]
            # keep the newest version; a null version never displaces a buffered row
            if new is None or (old is not None and new <= old):
                return
        self._buffer[values[0]] = values
        if self._oldest is None:
            self._oldest = time.monotonic()

    # -- flushing (always on the task's one connection) ------------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        import psycopg

        rows = [self._buffer[k] for k in sorted(self._buffer)]  # key order: no deadlocks between tasks
        params = ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(self._statement, params)
                self._conn.commit()
                break
            except psycopg.Error as exc:
                state = getattr(exc, "sqlstate", None) or ""
                lost = self._conn is None or self._conn.closed or getattr(self._conn, "broken", False)
                transient = (lost or state.startswith("08") or state in ("40001", "40P01", "57P01")
                             or (isinstance(exc, psycopg.OperationalError) and not state))
                if not transient:
                    try:
                        self._conn.rollback()
                    except Exception:
                        self._close_connection()
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed "
                                    f"(first key {rows[0][0]!r}): {type(exc).__name__}: {exc}") from None
                self._close_connection()  # close the broken one before any reconnect
                attempt += 1
                if attempt > self.max_retries:
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed after {attempt} "
                                    f"attempts: {type(exc).__name__}: {exc}") from None
                time.sleep(min(5.0, self.backoff_ms / 1000.0 * 2 ** (attempt - 1)))
        self._buffer.clear()
        self._oldest = None

    def _timer_loop(self) -> None:
        interval = max(self.max_dwell_ms, 10) / 2000.0
        while not self._stop.wait(interval):
            with self._lock:
                if not self._open or self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or close()
                        self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- foreach contract --------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._close_connection()  # defensive: a reused object never keeps an old connection
        self._reset()
        try:
            self._statement = self._build_statement()
            self._connect()
        except BaseException:
            self._close_connection()  # Spark calls no close() when open() raises
            raise
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, name="events-sink-timer", daemon=True)
            self._timer.start()
        return True  # never False: Spark would drop this partition's rows without an error

    def process(self, row: Any) -> None:
        if not self._open:
            raise SinkError("process() called on a writer that is not open")
        values = self._values(row)
        with self._lock:
            self._raise_stored()
            self._buffer_row(values)
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            self._close_connection()
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                else:
                    self._buffer.clear()  # Spark replays the epoch; the version guard makes that harmless
        finally:
            self._close_connection()  # the connection never outlives its task


def EventsWriter(dsn: str, table: str) -> EventsForeachWriter:
    """The foreach writer for ``df.writeStream.foreach(...)``."""
    return EventsForeachWriter(dsn, table)
