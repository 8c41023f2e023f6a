"""High-throughput foreach writer for ``events`` (newest version wins).

Target: one sink task can receive ~30,000 events (id, version, ~80-byte
payload) in one epoch and must write them at bulk-load speed, not one INSERT
round trip per row.

How
---
* ``process`` only appends to an in-memory buffer, de-duplicated per id
  (keeps the highest version seen in the buffer), so Postgres never has to
  touch the same key twice in one statement.
* A *flush* ships the buffer with one ``COPY ... FROM STDIN (FORMAT BINARY)``
  into a session temp table and merges it with a single set-based statement::

      INSERT INTO events AS cur (id, version, payload)
      SELECT id, version, payload FROM stage ORDER BY id
      ON CONFLICT (id) DO UPDATE
         SET version = EXCLUDED.version, payload = EXCLUDED.payload
       WHERE cur.version < EXCLUDED.version

  in one transaction. COPY is the bulk-load path (a few round trips for the
  whole batch); ``ORDER BY id`` gives every concurrent task the same lock
  order, avoiding deadlocks between tasks upserting overlapping ids; the
  ``WHERE`` keeps the newest version whatever the arrival order, and makes
  replays of an epoch (foreach is at-least-once) no-ops. The temp table is
  ``ON COMMIT DELETE ROWS`` so it is empty again after each flush.
* Flush triggers: buffer reaches ``batch_size`` distinct ids (default 10,000),
  the oldest buffered row is older than ``linger_ms`` (default 100 ms; <= 0
  disables the time trigger, i.e. flush only on size and at close - checked
  on every ``process`` call and by a small background timer thread, so in
  real-time mode rows are not held back until the end of a long epoch when
  input pauses), and ``close()`` at the end of the task/epoch.
* Errors: a failed flush (in ``process``, the timer or ``close``) fails the
  task; Spark retries it / the query restarts from the checkpoint and the
  idempotent merge makes the replay safe. On ``close(error)`` the unflushed
  buffer is discarded (it will be replayed) and the connection closed.

One connection per task (opened in ``open``, closed in ``close``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Dict, Optional, Tuple

import psycopg
from psycopg import sql


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*[p.strip('"') for p in table.split(".")])


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        return getattr(row, name, None)


class EventsWriter:
    """``df.writeStream.foreach(EventsWriter(dsn, "events"))``"""

    STAGE = "_events_sink_stage"

    def __init__(self, dsn: str, table: str = "events", batch_size: int = 10_000,
                 linger_ms: float = 100.0, background_flush: bool = True):
        self.dsn = dsn
        self.table = table
        self.batch_size = int(batch_size)
        self.linger_s = float(linger_ms) / 1000.0
        self.background_flush = background_flush
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: Optional[psycopg.Connection] = None
        self._buf: Dict[Any, Tuple[Any, Any]] = {}
        self._first_ts: Optional[float] = None
        self._lock = None
        self._stop = None
        self._timer = None
        self._bg_error: Optional[BaseException] = None
        self._merge_sql = None
        self._copy_sql = None
        self.rows_flushed = 0

    def __getstate__(self):
        return {k: self.__dict__[k]
                for k in ("dsn", "table", "batch_size", "linger_s", "background_flush")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_runtime()

    # ------------------------------------------------------------ lifecycle
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset_runtime()
        conn = psycopg.connect(self.dsn, autocommit=False)
        try:
            stage = sql.Identifier(self.STAGE)
            with conn.transaction():
                conn.execute(sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {s} "
                    "(id text, version bigint, payload text) ON COMMIT DELETE ROWS"
                ).format(s=stage))
            self._copy_sql = sql.SQL(
                "COPY {s} (id, version, payload) FROM STDIN (FORMAT BINARY)"
            ).format(s=stage)
            self._merge_sql = sql.SQL(
                "INSERT INTO {t} AS cur (id, version, payload) "
                "SELECT id, version, payload FROM {s} ORDER BY id "
                "ON CONFLICT (id) DO UPDATE "
                "SET version = EXCLUDED.version, payload = EXCLUDED.payload "
                "WHERE cur.version IS NULL OR cur.version < EXCLUDED.version"
            ).format(t=_table_ident(self.table), s=stage)
        except BaseException:
            conn.close()   # PySpark does not call close() if open() raises
            raise
        self._conn = conn
        self._lock = threading.Lock()
        if self.background_flush and self.linger_s > 0:
            self._stop = threading.Event()
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name="events-sink-flusher")
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        if self._bg_error is not None:
            raise self._bg_error
        rid = _get(row, "id")
        version = _get(row, "version")
        payload = _get(row, "payload")
        with self._lock:
            prev = self._buf.get(rid)
            if prev is None or _newer(version, prev[0]):
                self._buf[rid] = (version, payload)
            if self._first_ts is None:
                self._first_ts = time.monotonic()
            if (len(self._buf) >= self.batch_size
                    or (self.linger_s > 0
                        and time.monotonic() - self._first_ts >= self.linger_s)):
                self._flush_locked()

    def close(self, error: Optional[BaseException]) -> None:
        try:
            self._stop_timer()
            if error is None and self._conn is not None:
                if self._bg_error is not None:
                    raise self._bg_error
                with self._lock:
                    self._flush_locked()
        finally:
            conn, self._conn = self._conn, None
            self._buf = {}
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass

    # -------------------------------------------------------------- flushing
    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._buf:
            self._first_ts = None
            return
        buf = self._buf
        conn = self._conn
        try:
            with conn.transaction():
                with conn.cursor() as cur:
                    with cur.copy(self._copy_sql) as cp:
                        cp.set_types(["text", "int8", "text"])
                        for rid, (version, payload) in buf.items():
                            cp.write_row((rid, version, payload))
                    cur.execute(self._merge_sql)
        except BaseException:
            # keep the buffer untouched: the task fails and Spark replays it
            raise
        self.rows_flushed += len(buf)
        self._buf = {}
        self._first_ts = None

    def _timer_loop(self) -> None:
        stop = self._stop
        interval = max(self.linger_s / 2.0, 0.005)
        while not stop.wait(interval):
            with self._lock:
                if self._conn is None or self._bg_error is not None:
                    return
                if self._first_ts is None or time.monotonic() - self._first_ts < self.linger_s:
                    continue
                try:
                    self._flush_locked()
                except BaseException as e:  # surfaced by next process()/close()
                    self._bg_error = e
                    return

    def _stop_timer(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._timer is not None:
            self._timer.join()
        self._stop = self._timer = None


def _newer(a: Any, b: Any) -> bool:
    if b is None:
        return True
    if a is None:
        return False
    return a > b


__all__ = ["EventsWriter"]
