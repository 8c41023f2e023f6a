"""A PySpark ``foreach`` writer that upserts (id, version, payload) rows into Postgres, newest version wins.

Built for what real-time mode (and any ``foreach`` query) does to a sink:

- **Replays (at-least-once delivery).** After a failure Spark replays the
  unfinished (long) batch, so the same rows arrive again, possibly after newer
  ones. Every write is ``INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE
  stored.version < new.version``: a replayed, older or equal version never
  overwrites a newer row, so a replay leaves the table exactly as one clean
  run would. Rows out of order inside one buffer are resolved the same way
  (the higher version is kept).
- **open()/close() once per long batch.** Under real-time mode ``close()`` only
  comes when the long batch ends (minutes), so rows are written from
  ``process()`` when ``max_batch_rows`` distinct ids are buffered, and by a
  timer thread once the oldest buffered row is ``max_dwell_ms`` old.
- **Hostile values.** SQL is built with ``psycopg.sql`` identifiers and values
  travel as query parameters (one array per column, one statement per flush).
  Values Postgres cannot store as sent (NUL in text, lone surrogates, a
  version outside bigint, wrong Python types, a null id) raise
  :class:`BadRowError` naming the row's id; nothing is cut or coerced silently.
- **Postgres restart / lost connection / lock conflicts.** Reconnect and retry
  the flush with bounded, jittered exponential backoff; the flush is one
  statement (one transaction), so a retry is safe.
- **Unreachable server.** ``open()`` retries the connect (``connect_timeout``
  per attempt) and then raises :class:`SinkConnectionError`; it never returns
  ``False``, which would make Spark drop the partition's rows without a trace.
- **No error swallowed, no row lost silently.** A failed flush (bad row,
  permanent error, retry budget spent) is raised by ``process()``/``close()``
  (a timer-thread failure is logged at ERROR at once and raised by the next
  call); after it nothing more is written and the task fails, so Spark
  retries or fails the query and the rows are replayed.

Only the settings travel to the executors (pickled); each task opens its own
connection. The table: ``CREATE TABLE t (id text PRIMARY KEY, version bigint,
payload text)``.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = logging.getLogger(__name__)

BIGINT_MIN, BIGINT_MAX = -(2 ** 63), 2 ** 63 - 1
COLUMNS = ("id", "version", "payload")

# SQLSTATE classes, by what retrying can change.
_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03", "25006", "40003", "53300")
_CONFLICT_STATES = ("40001", "40P01", "55P03")
_ROW_STATES = ("22", "23", "21000", "54")
_LOGIN_TEXT = ("password authentication failed", "no pg_hba.conf entry", "authentication failed",
               "does not exist", "permission denied", "role ")
_SIMPLE_NAME = r"[A-Za-z_][A-Za-z0-9_$]*"


class SinkError(RuntimeError):
    """The sink could not write; the message says why."""


class SinkConnectionError(SinkError):
    """Could not connect, or the connection kept failing past the retry budget."""


class BadRowError(SinkError):
    """A row was rejected; ``row_id`` names it. Nothing of its flush was written."""

    def __init__(self, message: str, row_id: Any = None):
        super().__init__(message)
        self.row_id = row_id

    def __reduce__(self):  # survives pickling (Spark ships exceptions between processes)
        return (BadRowError, (str(self), self.row_id))


def _kind(exc: BaseException, connecting: bool = False) -> str:
    """'connection', 'conflict', 'row' or 'permanent': what retrying can change about ``exc``."""
    if not isinstance(exc, psycopg.Error):
        return "row" if isinstance(exc, (TypeError, ValueError, OverflowError)) else "permanent"
    state = getattr(exc, "sqlstate", None) or ""
    text = str(exc).lower()
    if connecting and (state.startswith(("28", "3D000", "42501")) or any(t in text for t in _LOGIN_TEXT)):
        return "permanent"  # wrong password, unknown database or role: retrying cannot help
    if state.startswith(_CONNECTION_STATES):
        return "connection"
    if state.startswith(_CONFLICT_STATES):
        return "conflict"
    if state.startswith(_ROW_STATES):
        return "row"
    if not state and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return "connection"  # detected by the client: the connection is gone or was refused
    return "permanent"


def _table_identifier(table: str | Sequence[str]) -> sql.Identifier:
    """``"events"`` or ``"schema.events"`` (two plain names) or ``("schema", "name")``; any other text is one exact name."""
    if isinstance(table, (tuple, list)):
        parts = tuple(table)
    elif isinstance(table, str) and re.fullmatch(rf"{_SIMPLE_NAME}\.{_SIMPLE_NAME}", table):
        parts = tuple(table.split("."))
    else:
        parts = (table,)
    if not parts or len(parts) > 2 or not all(isinstance(p, str) and p for p in parts):
        raise ValueError(f"table must be a non-empty name or (schema, name), got {table!r}")
    if any("\x00" in p for p in parts):
        raise ValueError("table name must not contain NUL")
    return sql.Identifier(*parts)


def _check_text(value: str, what: str, row_id: Any) -> None:
    if "\x00" in value:
        raise BadRowError(f"row with id={row_id!r} rejected: {what} contains a NUL character, "
                          "which Postgres text cannot store", row_id)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRowError(f"row with id={row_id!r} rejected: {what} is not valid Unicode "
                          "(lone surrogate)", row_id) from None


def _backoff(attempt: int, initial_ms: int, max_ms: int) -> float:
    cap = min(max_ms, initial_ms * 2 ** (attempt - 1)) / 1000
    return cap / 2 + random.uniform(0, cap / 2)


class EventsWriter:
    """``foreach`` writer: ``df.writeStream.foreach(EventsWriter(dsn, "events"))``.

    Rows must carry ``id`` (str, not null), ``version`` (int within bigint, or
    null) and ``payload`` (str or null); a Spark ``Row``, a dict or a 3-tuple
    in that order. Null versions follow SQL: a null version never replaces a
    stored row that has a version.
    """

    def __init__(self, dsn: str, table: str | Sequence[str], *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 6, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, connect_timeout_s: int = 10):
        if not isinstance(dsn, str):
            raise TypeError("dsn must be a libpq connection string or URL")
        conninfo_to_dict(dsn)  # a DSN libpq cannot parse fails here, on the driver, before Spark starts
        _table_identifier(table)
        for name, value, low in (("max_batch_rows", max_batch_rows, 1), ("max_dwell_ms", max_dwell_ms, 0),
                                 ("max_retries", max_retries, 0), ("backoff_initial_ms", backoff_initial_ms, 1),
                                 ("backoff_max_ms", backoff_max_ms, 1), ("connect_timeout_s", connect_timeout_s, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_s = connect_timeout_s
        self._reset()

    # -- pickling: only the configuration travels to the executors ------------------
    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_initial_ms",
               "backoff_max_ms", "connect_timeout_s")

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        for k in self._CONFIG:
            setattr(self, k, state[k])
        self._reset()

    def __repr__(self) -> str:  # never the DSN: it may hold a password
        return f"EventsWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._state = "new"                      # new -> open -> closed
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()           # guards the buffer and the connection
        self._buffer: dict[str, tuple] = {}      # id -> (id, version, payload), one row per id
        self._oldest: float | None = None        # monotonic time of the oldest buffered row
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._statement: bytes | sql.Composed | None = None
        self.partition_id = self.epoch_id = None
        self.metrics = {"rows_received": 0, "rows_written": 0, "rows_stale_or_unchanged": 0,
                        "flushes": 0, "timer_flushes": 0, "reconnects": 0, "conflict_retries": 0}

    # -- the foreach contract -------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Connect (with retries) and check the table; return True or raise, never False."""
        if self._state == "open":
            raise SinkError(f"open({partition_id}, {epoch_id}) while partition {self.partition_id} epoch "
                            f"{self.epoch_id} is still open: call close() first")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._statement = self._upsert_statement()
        try:
            # An upsert of zero rows checks the table, its columns, their types and that
            # `id` has a unique constraint (ON CONFLICT is resolved at planning time).
            self._retrying(lambda conn: conn.execute(self._statement, ([], [], [])), "open")
        except BaseException:
            self._close_connection()
            raise
        self._state = "open"
        if self.max_dwell_ms:
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name=f"events-writer-p{partition_id}-e{epoch_id}")
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        """Buffer one row (one per id, the higher version kept); flush when the buffer is full."""
        if self._state != "open":
            raise SinkError(f"process() on a writer that is {self._state}: call open() first; the row was not written")
        values = self._values(row)
        with self._lock:
            if self._error is not None:
                raise self._error
            self.metrics["rows_received"] += 1
            key = values[0]
            held = self._buffer.get(key)
            if held is None or self._newer(values[1], held[1]):
                self._buffer[key] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked(by_timer=False)

    def close(self, error: BaseException | None = None) -> None:
        """On success write what is left and raise any error; with an error drop unwritten rows (Spark replays them)."""
        if self._state != "open":
            return
        self._state = "closed"
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join()
        try:
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked(by_timer=False)
                else:
                    self._buffer.clear()  # the task failed: Spark replays these rows
        finally:
            self._close_connection()
            log.info("events writer closed (partition=%s epoch=%s error=%s): %s", self.partition_id,
                     self.epoch_id, type(error).__name__ if error else None, self.metrics)

    # -- rows -----------------------------------------------------------------------
    @staticmethod
    def _newer(candidate: int | None, held: int | None) -> bool:
        if candidate is None:
            return False          # a null version never displaces a buffered row
        return held is None or candidate > held   # equal versions: the first row stays

    def _values(self, row: Any) -> tuple:
        try:
            if hasattr(row, "asDict"):
                fields = row.asDict()
            elif isinstance(row, Mapping):
                fields = row
            elif isinstance(row, (tuple, list)) and len(row) == 3:
                fields = dict(zip(COLUMNS, row))
            else:
                raise BadRowError(f"unsupported row {type(row).__name__}: expected a Row, a dict or "
                                  "an (id, version, payload) tuple")
            row_id, version, payload = (fields[c] for c in COLUMNS)
        except KeyError as exc:
            raise BadRowError(f"row is missing the field {exc.args[0]!r} (needs id, version, payload)") from None
        if row_id is None:
            raise BadRowError("row with a null id rejected: id is the primary key")
        if isinstance(row_id, int) and not isinstance(row_id, bool):
            row_id = str(row_id)
        if not isinstance(row_id, str):
            raise BadRowError(f"row with id={row_id!r} rejected: id must be a string, "
                              f"got {type(row_id).__name__}", row_id)
        _check_text(row_id, "id", row_id)
        if version is not None:
            if isinstance(version, bool) or not isinstance(version, int):
                raise BadRowError(f"row with id={row_id!r} rejected: version must be an integer, "
                                  f"got {type(version).__name__}", row_id)
            if not BIGINT_MIN <= version <= BIGINT_MAX:
                raise BadRowError(f"row with id={row_id!r} rejected: version {version} is outside bigint", row_id)
        if payload is not None:
            if not isinstance(payload, str):
                raise BadRowError(f"row with id={row_id!r} rejected: payload must be a string, "
                                  f"got {type(payload).__name__}", row_id)
            _check_text(payload, "payload", row_id)
        return (row_id, version, payload)

    # -- writing ----------------------------------------------------------------------
    def _upsert_statement(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {table} AS cur ({id}, {version}, {payload}) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
            "ON CONFLICT ({id}) DO UPDATE SET {version} = EXCLUDED.{version}, {payload} = EXCLUDED.{payload} "
            "WHERE cur.{version} IS NULL OR cur.{version} < EXCLUDED.{version}"
        ).format(table=_table_identifier(self.table), id=sql.Identifier("id"),
                 version=sql.Identifier("version"), payload=sql.Identifier("payload"))

    def _timer_loop(self) -> None:
        dwell = self.max_dwell_ms / 1000
        try:
            while not self._stop.is_set():
                with self._lock:
                    oldest = self._oldest
                    if oldest is not None and time.monotonic() >= oldest + dwell and self._error is None:
                        self._flush_locked(by_timer=True)
                        continue
                wait = dwell if oldest is None else max(0.001, oldest + dwell - time.monotonic())
                self._stop.wait(wait)
        except BaseException as exc:  # never die silently: raised by the next process()/close()
            with self._lock:
                if self._error is None:
                    self._error = exc
            log.error("events writer: flush failed; nothing more is written and the task fails at the "
                      "next process()/close() (partition=%s epoch=%s): %s", self.partition_id, self.epoch_id, exc)

    def _flush_locked(self, by_timer: bool) -> None:
        """Write the buffer as one statement (caller holds the lock); rows leave the buffer only once written."""
        if not self._buffer:
            self._oldest = None
            return
        if self._error is not None:
            raise self._error
        batch = sorted(self._buffer.values(), key=lambda r: r[0])  # key order: no deadlock between tasks
        arrays = ([r[0] for r in batch], [r[1] for r in batch], [r[2] for r in batch])
        try:
            written = self._retrying(lambda conn: conn.execute(self._statement, arrays).rowcount, "flush", batch)
        except BaseException as exc:
            self._error = exc  # nothing more is written by this writer
            raise
        self._buffer.clear()
        self._oldest = None
        written = max(written or 0, 0)
        self.metrics["flushes"] += 1
        self.metrics["timer_flushes"] += int(by_timer)
        self.metrics["rows_written"] += written
        self.metrics["rows_stale_or_unchanged"] += len(batch) - written

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._close_connection()
            params = conninfo_to_dict(self.dsn)
            extra = {k: v for k, v in (("connect_timeout", self.connect_timeout_s),
                                       ("application_name", "events-foreach-writer"),
                                       ("keepalives", 1), ("keepalives_idle", 30),
                                       ("keepalives_interval", 10), ("keepalives_count", 3))
                     if k not in params}
            self._conn = psycopg.connect(make_conninfo(self.dsn, **extra), autocommit=True)
        return self._conn

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection must not hide the real error
                log.debug("ignoring an error while closing the connection", exc_info=True)

    def _retrying(self, action, what: str, batch: list[tuple] | None = None):
        attempt, started = 0, time.monotonic()
        while True:
            connecting = True
            try:
                conn = self._connect()
                connecting = False
                return action(conn)
            except (SinkError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:
                kind = _kind(exc, connecting)
                if kind in ("connection", "conflict") and attempt < self.max_retries:
                    attempt += 1
                    delay = _backoff(attempt, self.backoff_initial_ms, self.backoff_max_ms)
                    log.warning("events writer %s: %s (attempt %d of %d), retrying in %.2f s: %s",
                                what, kind, attempt, self.max_retries, delay, _one_line(exc))
                    if kind == "connection":
                        self._close_connection()
                        self.metrics["reconnects"] += 1
                    else:
                        self.metrics["conflict_retries"] += 1
                    time.sleep(delay)
                    continue
                if kind == "connection":
                    self._close_connection()
                    raise SinkConnectionError(
                        f"{what} failed after {attempt + 1} attempts in {time.monotonic() - started:.1f} s "
                        f"({_where(self.dsn)}): {_one_line(exc)}") from None
                if connecting:
                    self._close_connection()
                    raise SinkConnectionError(f"cannot connect to Postgres ({_where(self.dsn)}): "
                                              f"{_one_line(exc)}") from None
                if kind == "row" and batch:
                    raise self._bad_row(batch, exc) from None
                raise SinkError(f"{what} on table {self.table!r} failed (not retried): {_one_line(exc)}") from None

    def _bad_row(self, batch: list[tuple], exc: BaseException) -> BadRowError:
        """Find the row that fails, each tried alone in a transaction that is always rolled back."""
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            for row in batch:
                try:
                    with conn.transaction(force_rollback=True):
                        conn.execute(self._statement, ([row[0]], [row[1]], [row[2]]))
                except psycopg.Error as single:
                    return BadRowError(f"row with id={row[0]!r} rejected by Postgres: {_one_line(single)}; "
                                       "nothing of its flush was written", row[0])
        return BadRowError(f"a flush of {len(batch)} rows was rejected by Postgres: {_one_line(exc)}; "
                           "nothing of it was written")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _where(dsn: str) -> str:
    """host:port/dbname of a DSN, never its password."""
    try:
        p = conninfo_to_dict(dsn)
    except Exception:
        return "unparseable DSN"
    return f"host={p.get('host', '(default)')} port={p.get('port', '(default)')} dbname={p.get('dbname', '(default)')}"
