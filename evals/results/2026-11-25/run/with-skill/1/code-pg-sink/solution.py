"""An idempotent PySpark ``foreach`` writer upserting (id, version, payload) rows into Postgres.

Built for what real-time mode does to a sink:

- **Replays** (at-least-once delivery: a failed long batch is re-sent from its start) and
  **late/out-of-order older versions**: ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE the
  stored version is strictly older``, so replaying a row is a no-op and an older version never
  overwrites a newer one. Inside a flush rows are deduplicated per id (highest version wins)
  and written sorted by id, so concurrent tasks lock rows in one order.
- **Long batches**: ``open()``/``close()`` run once per long batch (minutes), so rows are
  flushed from ``process()`` when ``max_batch_rows`` ids are buffered and by a background
  timer when the oldest buffered row is ``max_dwell_ms`` old -- never only in ``close()``.
- **Hostile values**: values are bound as query parameters (``unnest`` of typed arrays) and the
  table name is quoted with ``psycopg.sql.Identifier``; no value ever becomes SQL text.
- **Postgres restart / lost connection**: a flush that fails with a connection-class error
  (SQLSTATE 08*, admin shutdown, too many connections) or a serialization/deadlock failure is
  retried on a new connection with bounded, jittered exponential backoff; the buffer is kept
  until the transaction commits.
- **Unreachable server**: ``open()`` retries, then *raises* -- it never returns ``False``
  (Spark would silently drop the partition's rows). Exhausted retries in a flush raise too,
  so the task fails and Spark replays the batch.
- **Bad rows**: a row the table rejects (null id or version, a NUL byte in text, a version
  out of bigint range, ...) raises :class:`BadRowError` naming its id and the reason; nothing
  of that flush is committed. Errors raised in the timer thread are re-raised from the next
  ``process()`` or from ``close()``; nothing is swallowed.

Usage::

    writer = EventsWriter("postgresql://user:pw@host:5432/db", "events")
    (df.select("id", "version", "payload").writeStream.foreach(writer)
       .outputMode("update").option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes").start())
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

log = logging.getLogger(__name__)

BIGINT_MIN, BIGINT_MAX = -(2 ** 63), 2 ** 63 - 1


class SinkError(RuntimeError):
    """The sink could not write; the task must fail (Spark replays the batch)."""


class BadRowError(SinkError):
    """A row the table rejects; the message names its id."""


def _is_transient(exc: BaseException) -> bool:
    """Errors worth a reconnect-and-retry: lost connections, restarts, lock conflicts."""
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected,
                        pg_errors.AdminShutdown, pg_errors.CrashShutdown,
                        pg_errors.CannotConnectNow, pg_errors.TooManyConnections)):
        return True
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate:
        return sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03", "53300")
    # no SQLSTATE: a client-side connection failure (refused, reset, closed)
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


class EventsWriter:
    """``foreach`` writer: version-guarded upsert of (id, version, payload) into ``table``.

    ``table``: ``"events"`` or ``"schema.events"`` (each part quoted as an identifier).
    Only the configuration is pickled to the executors; each task opens its own connection.
    """

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 500, max_dwell_ms: int = 100,
                 max_retries: int = 6, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                 connect_timeout_s: int = 10):
        if not isinstance(table, str) or not table.strip():
            raise ValueError("table must be a non-empty name")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_s = connect_timeout_s
        self._reset()

    # -- pickling: configuration only ---------------------------------------------------
    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s")

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # never show the DSN: it may hold a password
        return f"EventsWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()
        self._buffer: dict[str, tuple[int, str | None]] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False
        self.partition_id = self.epoch_id = None
        self.rows_written = 0

    # -- SQL ------------------------------------------------------------------------
    def _table_sql(self) -> sql.Composable:
        parts = [p for p in self.table.split(".")]
        return sql.Identifier(*parts)

    def _upsert_sql(self) -> sql.Composed:
        t = self._table_sql()
        return sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version"
        ).format(t=t)

    # -- connection -----------------------------------------------------------------
    def _sleep_backoff(self, attempt: int) -> None:
        delay = min(self.backoff_max_ms, self.backoff_initial_ms * (2 ** attempt))
        time.sleep(delay * (0.5 + random.random() / 2) / 1000.0)

    def _connect(self, attempts: int | None = None) -> psycopg.Connection:
        last: BaseException | None = None
        attempts = self.max_retries + 1 if attempts is None else attempts
        for attempt in range(attempts):
            try:
                return psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                       application_name="spark-events-writer")
            except psycopg.Error as exc:
                if not _is_transient(exc):
                    raise SinkError(f"cannot connect to Postgres: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
                last = exc
                log.warning("events writer: connect attempt %d/%d failed: %s", attempt + 1,
                            attempts, type(exc).__name__)
                if attempt < attempts - 1:
                    self._sleep_backoff(attempt)
        raise SinkError(f"cannot connect to Postgres after {attempts} attempts: "
                        f"{type(last).__name__}") from last

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a dead connection: nothing to report
                pass

    # -- foreach contract -------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Connect (with retries) and check the table; raise on failure, never return False."""
        if self._open:
            self.close(None)
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect()
        try:
            with self._conn.cursor() as cur:  # fail early on a missing table or column
                cur.execute(sql.SQL("SELECT id, version, payload FROM {} WHERE false").format(self._table_sql()))
            self._conn.rollback()
        except psycopg.Error as exc:
            self._close_conn()
            raise SinkError(f"table {self.table!r} is not usable: {str(exc).splitlines()[0]}") from exc
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._run_timer, daemon=True,
                                           name=f"events-writer-timer-p{partition_id}")
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        """Buffer one row (highest version per id); flush when the buffer is full."""
        if not self._open:
            raise SinkError("process() called before open() or after close(); the row was not written")
        self._raise_pending()
        key, version, payload = self._values(row)
        with self._lock:
            current = self._buffer.get(key)
            if current is None or version > current[0]:
                self._buffer[key] = (version, payload)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush()

    def close(self, error: BaseException | None) -> None:
        """Without an error: write what is left and raise any failure. With an error: drop the
        unwritten buffer (Spark replays the batch) and close."""
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=60)
        try:
            if error is None:
                self._raise_pending()
                with self._lock:
                    self._flush()
        finally:
            with self._lock:
                self._buffer.clear()
                self._close_conn()
            log.info("events writer closed (partition=%s epoch=%s rows_written=%d error=%s)",
                     self.partition_id, self.epoch_id, self.rows_written,
                     type(error).__name__ if error else None)

    # -- internals --------------------------------------------------------------------
    @staticmethod
    def _field(row: Any, name: str) -> Any:
        try:
            return row[name]
        except (KeyError, ValueError, IndexError, TypeError):
            value = getattr(row, name, _MISSING)
            if value is _MISSING:
                raise BadRowError(f"row has no field {name!r}: {row!r}") from None
            return value

    def _values(self, row: Any) -> tuple[str, int, str | None]:
        key = self._field(row, "id")
        version = self._field(row, "version")
        payload = self._field(row, "payload")
        if key is None:
            raise BadRowError("row with id NULL rejected: id is the primary key")
        key = str(key)
        if version is None or isinstance(version, bool):
            raise BadRowError(f"row with id={key!r} rejected at column version: {version!r} is not a version")
        try:
            version = int(version)
        except (TypeError, ValueError):
            raise BadRowError(f"row with id={key!r} rejected at column version: {version!r} is not an integer") from None
        if not BIGINT_MIN <= version <= BIGINT_MAX:
            raise BadRowError(f"row with id={key!r} rejected at column version: {version} is out of bigint range")
        if payload is not None and not isinstance(payload, str):
            payload = str(payload)
        for column, text in (("id", key), ("payload", payload)):
            if text is not None and "\x00" in text:
                raise BadRowError(f"row with id={key!r} rejected at column {column}: "
                                  "text contains a NUL byte, which Postgres text cannot store")
        return key, version, payload

    def _raise_pending(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _run_timer(self) -> None:
        interval = max(self.max_dwell_ms / 4000.0, 0.002)
        while not self._stop.wait(interval):
            with self._lock:
                if self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush()
                    except BaseException as exc:  # handed to the task thread, never swallowed
                        self._error = exc
                        log.error("events writer: flush failed in the timer: %s", exc)

    def _flush(self) -> None:
        """Write the buffer in one transaction (sorted by id), retrying transient failures."""
        if not self._buffer:
            return
        keys = sorted(self._buffer)
        versions = [self._buffer[k][0] for k in keys]
        payloads = [self._buffer[k][1] for k in keys]
        statement = self._upsert_sql()
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect(attempts=1)  # this loop does the retrying
                with self._conn.cursor() as cur:
                    cur.execute(statement, (keys, versions, payloads))
                self._conn.commit()
                self.rows_written += len(keys)
                self._buffer.clear()
                self._oldest = None
                return
            except psycopg.Error as exc:
                last = exc
                if not _is_transient(exc):
                    self._rollback_quietly()
                    raise self._diagnose(keys, versions, payloads, exc) from exc
                log.warning("events writer: flush attempt %d/%d failed (%s); reconnecting",
                            attempt + 1, self.max_retries + 1, type(exc).__name__)
                self._close_conn()
                if attempt < self.max_retries:
                    self._sleep_backoff(attempt)
            except SinkError as exc:  # reconnect failed: retry within this loop's budget
                if isinstance(exc, BadRowError) or not _is_transient(exc.__cause__ or exc):
                    raise
                last = exc
                if attempt < self.max_retries:
                    self._sleep_backoff(attempt)
        raise SinkError(f"flush of {len(keys)} rows failed after {self.max_retries + 1} attempts: "
                        f"{type(last).__name__}: {str(last).splitlines()[0] if str(last) else ''}") from last

    def _rollback_quietly(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except psycopg.Error:
            self._close_conn()

    def _diagnose(self, keys, versions, payloads, exc: BaseException) -> SinkError:
        """Find the row the table rejects (each tried alone, rolled back) and name it."""
        statement = self._upsert_sql()
        try:
            for key, version, payload in zip(keys, versions, payloads):
                try:
                    with self._conn.cursor() as cur:
                        cur.execute(statement, ([key], [version], [payload]))
                except psycopg.Error as row_exc:
                    self._conn.rollback()
                    return BadRowError(f"row with id={key!r} rejected: {type(row_exc).__name__}: "
                                       f"{str(row_exc).splitlines()[0]} [SQLSTATE {row_exc.sqlstate}]; "
                                       "nothing of its flush was written")
                finally:
                    if not self._conn.closed and self._conn.info.transaction_status != 0:
                        self._conn.rollback()
        except psycopg.Error:
            pass
        first = str(exc).splitlines()[0] if str(exc) else ""
        return SinkError(f"flush of {len(keys)} rows failed: {type(exc).__name__}: {first}; nothing was written")


_MISSING = object()
