"""Bulk-speed foreach writer for ``events`` (newest version wins).

Table::

    events(id text primary key, version bigint, payload text)

Usage::

    (df.writeStream
       .outputMode("update")                      # required by real-time mode
       .foreach(EventsWriter(dsn, "events"))
       .option("checkpointLocation", ...)
       .trigger(realTime="5 minutes")
       .start())

Write path (per flush, one transaction, 3 round trips regardless of size)
------------------------------------------------------------------------
1. rows are buffered in the task; duplicates of an id inside the buffer are
   collapsed in Python to the newest version;
2. ``COPY events_stage (id, version, payload) FROM STDIN (FORMAT BINARY)``
   into a session-local TEMP table (no WAL, no index, ``ON COMMIT DELETE
   ROWS``) - the same mechanism as a bulk load;
3. one set-based statement::

       INSERT INTO events AS e SELECT .. FROM events_stage ORDER BY id
       ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version,
                                      payload = EXCLUDED.payload
       WHERE e.version IS NULL OR EXCLUDED.version > e.version

   (ordered by id so concurrent tasks lock rows in the same order: no
   deadlocks), then COMMIT.

30,000 rows therefore cost one COPY stream + one INSERT..SELECT instead of
30,000 statements.  Measured locally (2 shared cores, Postgres 15): see
NOTES.md.

When is it flushed
------------------
* as soon as ``batch_rows`` (default 10,000) rows are buffered - a 30,000-row
  burst becomes 3 bulk flushes, memory stays bounded;
* when the oldest buffered row is ``max_delay_s`` (default 0.2 s) old: a
  daemon thread in the task flushes a partial buffer, because in real-time
  mode ``process`` is only called when a row arrives and ``close`` only at the
  end of the (long) batch - trailing rows must not wait for either;
* in ``close`` (end of the epoch / task), if no error.

Errors in the background flush are re-raised in the next ``process`` or in
``close``, so the task fails and Spark retries the epoch; the upsert is
idempotent (newer-version guard), so replays are harmless.

The connection lives exactly as long as the task (opened in ``open``, always
closed in ``close``), so the sink holds at most one connection per running
task.
"""

from __future__ import annotations

import threading
import time

import psycopg
from psycopg import sql

STAGE = "events_stage"


def _table_identifier(table: str) -> sql.Composable:
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return sql.Identifier(*parts)


def _get(row, name):
    try:
        return row[name]
    except (KeyError, IndexError, TypeError, ValueError):
        return getattr(row, name, None)


def _newer(a, b) -> bool:
    """Should version a replace version b?  NULL is the oldest; ties keep b."""
    if b is None:
        return a is not None
    return a is not None and a > b


class EventsWriter:
    """Foreach writer (open/process/close) using COPY + set-based upsert."""

    def __init__(self, dsn: str, table: str = "events", batch_rows: int = 10_000,
                 max_delay_s: float = 0.2, connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.batch_rows = max(1, int(batch_rows))
        self.max_delay_s = max_delay_s
        self.connect_timeout = connect_timeout
        self._reset_runtime()

    def _reset_runtime(self):
        self._conn = None
        self._buf = {}
        self._first_ts = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._bg_error = None
        self._pos = None

    def __getstate__(self):  # ship only settings to the executors
        st = self.__dict__.copy()
        for k in ("_conn", "_buf", "_first_ts", "_lock", "_stop", "_thread",
                  "_bg_error", "_pos"):
            st[k] = None
        st["_buf"] = {}
        return st

    # -- foreach protocol ----------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        self._reset_runtime()
        t = _table_identifier(self.table)
        conn = psycopg.connect(
            self.dsn, autocommit=False, connect_timeout=self.connect_timeout,
            application_name=f"events-bulk-sink p{partition_id}",
            keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {s} "
                    "(id text, version bigint, payload text) ON COMMIT DELETE ROWS"
                ).format(s=sql.Identifier(STAGE)))
            conn.commit()
        except BaseException:
            conn.close()  # Spark does not call close() if open() raises
            raise
        self._conn = conn
        self._copy_sql = sql.SQL(
            "COPY {s} (id, version, payload) FROM STDIN (FORMAT BINARY)"
        ).format(s=sql.Identifier(STAGE))
        self._merge_sql = sql.SQL(
            "INSERT INTO {t} AS e (id, version, payload) "
            "SELECT id, version, payload FROM {s} ORDER BY id "
            "ON CONFLICT (id) DO UPDATE "
            "SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE e.version IS NULL "
            "   OR (EXCLUDED.version IS NOT NULL AND EXCLUDED.version > e.version)"
        ).format(t=t, s=sql.Identifier(STAGE))
        self._lock = threading.Lock()
        if self.max_delay_s and self.max_delay_s > 0:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._timer, daemon=True,
                                            name="events-sink-flusher")
            self._thread.start()
        return True

    def process(self, row) -> None:
        if self._bg_error is not None:
            raise self._bg_error
        fields = getattr(row, "__fields__", None)
        if fields is not None:
            # pyspark Row is a tuple: resolve column positions once per task,
            # then index positionally (name lookup per value is ~3x slower).
            if self._pos is None or self._pos[0] is not fields:
                self._pos = (fields, fields.index("id"),
                             fields.index("version"), fields.index("payload"))
            _, i_id, i_ver, i_pay = self._pos
            rid, ver, pay = (tuple.__getitem__(row, i_id),
                             tuple.__getitem__(row, i_ver),
                             tuple.__getitem__(row, i_pay))
        else:
            rid, ver, pay = _get(row, "id"), _get(row, "version"), _get(row, "payload")
        with self._lock:
            cur = self._buf.get(rid)
            if cur is None or _newer(ver, cur[1]):
                self._buf[rid] = (rid, ver, pay)
            if self._first_ts is None:
                self._first_ts = time.monotonic()
            if len(self._buf) >= self.batch_rows:
                self._flush_locked()

    def close(self, error) -> None:
        conn = self._conn
        try:
            if self._stop is not None:
                self._stop.set()
                self._thread.join(timeout=60)
            if conn is None:
                return
            if error is None:
                if self._bg_error is not None:
                    raise self._bg_error
                with self._lock:
                    self._flush_locked()
            elif not conn.broken:
                try:
                    conn.rollback()
                except Exception:
                    pass
        finally:
            self._buf = {}
            self._conn = None
            if conn is not None:
                conn.close()

    # -- internals -----------------------------------------------------------
    def _timer(self):
        tick = min(self.max_delay_s, 0.05)
        while not self._stop.wait(tick):
            try:
                with self._lock:
                    if (self._first_ts is not None
                            and time.monotonic() - self._first_ts >= self.max_delay_s):
                        self._flush_locked()
            except BaseException as exc:  # surfaced in process()/close()
                self._bg_error = exc
                return

    def _flush_locked(self) -> None:
        if not self._buf:
            self._first_ts = None
            return
        rows = list(self._buf.values())
        conn = self._conn
        try:
            with conn.cursor() as cur:
                with cur.copy(self._copy_sql) as cp:
                    cp.set_types(["text", "int8", "text"])
                    for r in rows:
                        cp.write_row(r)
                cur.execute(self._merge_sql)
            conn.commit()  # ON COMMIT DELETE ROWS empties the stage table
        except BaseException:
            if not conn.broken:
                try:
                    conn.rollback()
                except Exception:
                    pass
            raise
        self._buf = {}
        self._first_ts = None


__all__ = ["EventsWriter"]
