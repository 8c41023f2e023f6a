"""EventsWriter: an idempotent PySpark ``foreach`` writer for (id, version, payload) rows into Postgres.

Target table::

    CREATE TABLE events (id text PRIMARY KEY, version bigint, payload text);

What real-time mode (and any streaming failure) does to a sink, and what this
writer does about it:

- Replayed epochs (at-least-once delivery: after a failure the whole
  unfinished long batch is sent again). Every write is an upsert on ``id``
  guarded by the version: ``ON CONFLICT (id) DO UPDATE ... WHERE
  t.version < EXCLUDED.version``. Replaying rows is a no-op.
- Late replays of older versions / rows out of order: the guard only lets a
  strictly newer version replace a stored row, so the newest version wins
  whatever the arrival order. Inside one buffer the higher version is kept too.
- Hostile values: SQL text is built with ``psycopg.sql.Identifier`` (table
  name) and values are bound as parameters, never formatted into SQL. Values
  Postgres cannot store (NUL in text, a non-integer version, a NULL id) are
  refused with ``BadRowError`` naming the row's key: the query fails loudly
  instead of dropping the row.
- Postgres restart / dropped connection: a flush that fails because the
  connection is lost is retried on a new connection with bounded, jittered
  exponential backoff; deadlocks/serialization failures are retried too.
  Past the budget a ``SinkConnectionError`` is raised.
- Unreachable server: ``open()`` retries the connection the same way (each
  attempt bounded by ``connect_timeout``) and then RAISES. It never returns
  False, which would make Spark skip the partition's rows silently.
- Real-time mode calls ``open()``/``close()`` once per long batch (minutes),
  so rows are flushed from ``process()`` when ``max_batch_rows`` keys are
  buffered, and by a timer thread when the oldest buffered row is
  ``max_dwell_ms`` old: they do not wait for ``close()``.
- No error is swallowed: an error of the timer thread is kept and raised by
  the next ``process()`` or by ``close()``; ``close(error)`` with an error
  drops only unwritten rows (Spark fails the task and replays them).

Each flush is one statement (one transaction, autocommit), rows sorted by id
so concurrent tasks lock shared keys in the same order (no deadlocks).

Usage::

    query = (events.writeStream.foreach(EventsWriter(dsn, "events"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")      # checkpoint interval, not latency
             .start())

The writer object is pickled to every task; it carries only its settings.
Take the DSN's password from a secret store, not from source code.
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

COLUMNS = ("id", "version", "payload")


class SinkError(RuntimeError):
    """The sink could not write; the message says why."""


class SinkConnectionError(SinkError):
    """Could not (re)connect to Postgres within the retry budget."""


class BadRowError(SinkError):
    """A row cannot be stored; ``key`` names it. Nothing of its flush was written."""

    def __init__(self, message: str, key: Any = None):
        super().__init__(message)
        self.key = key

    def __reduce__(self):
        return (BadRowError, (str(self), self.key))


# SQLSTATEs for which retrying on a fresh connection can help
_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03", "25006")
# lock conflicts: retry on the same connection
_CONFLICT_STATES = ("40001", "40P01", "55P03")


def _is_connection_error(exc: BaseException) -> bool:
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    if state.startswith(_CONNECTION_STATES):
        return True
    # errors detected by the client (server closed the connection, connect refused/timeout)
    return not state and isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


def _is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith(_CONFLICT_STATES)


def _is_login_error(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None) or ""
    text = str(exc).lower()
    return state.startswith(("28", "3D000")) or "password authentication failed" in text \
        or "does not exist" in text or "no pg_hba.conf entry" in text


def _table_identifier(table: str) -> sql.Identifier:
    """``events`` or ``schema.events`` (unquoted parts folded to lower case, as SQL does)."""
    parts = table.split(".")
    if not 1 <= len(parts) <= 2 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", p) for p in parts):
        # anything else is taken as one exact (case-sensitive) name
        return sql.Identifier(table)
    return sql.Identifier(*(p.lower() for p in parts))


def _redact(text: object, dsn: str) -> str:
    """Error text without the password, should the DSN appear in it."""
    out = str(text)
    match = re.search(r"password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn) or re.search(r"://[^:/@]+:([^@]+)@", dsn)
    if match:
        secret = match.group(1).strip("'")
        if secret:
            out = out.replace(secret, "***")
    return out


class EventsWriter:
    """PySpark ``foreach`` writer: idempotent, version-guarded upserts of (id, version, payload)."""

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 6, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000,
                 connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty table name")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 required")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_s = connect_timeout_s
        self._reset()

    # only the configuration travels to executors
    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"EventsWriter(table={self.table!r}, dsn=<hidden>)"

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()
        self._buffer: dict[str, tuple[str, int, str | None]] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False
        self._statement: bytes | sql.Composed | None = None
        self.partition_id: int | None = None
        self.epoch_id: int | None = None
        self.rows_written = 0

    # ------------------------------------------------------------ foreach contract
    def open(self, partition_id: int, epoch_id: int) -> bool:
        """Connect (with retries) and check the table. Raises on failure; never returns False."""
        if self._open:
            raise SinkError("open() called twice without close()")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        ident = _table_identifier(self.table)
        self._statement = sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) "
            "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[]) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version"
        ).format(t=ident)
        probe = sql.SQL("SELECT id, version, payload FROM {t} WHERE false").format(t=ident)
        self._with_retries(lambda conn: conn.execute(probe), "open")
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name=f"events-writer-timer-p{partition_id}")
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        """Buffer one row (highest version per id wins); flush when the buffer is full."""
        if not self._open:
            raise SinkError("process() called on a writer that is not open; the row was not written")
        values = self._values(row)
        with self._lock:
            self._raise_pending()
            stored = self._buffer.get(values[0])
            if stored is None or values[1] > stored[1]:
                self._buffer[values[0]] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush()

    def close(self, error: BaseException | None) -> None:
        """Without error: write what is left and raise any failure. With error: drop unwritten rows."""
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        try:
            with self._lock:
                if error is None:
                    self._raise_pending()
                    self._flush()
                else:
                    self._buffer.clear()  # Spark fails the task and replays these rows
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # closing a broken connection must not hide the real error
                    log.debug("ignoring an error while closing the connection", exc_info=True)
            log.info("events writer closed (partition=%s epoch=%s): %d rows written, error=%s",
                     self.partition_id, self.epoch_id, self.rows_written,
                     type(error).__name__ if error else None)

    # ------------------------------------------------------------ internals
    def _values(self, row: Any) -> tuple[str, int, str | None]:
        try:
            get = row.asDict() if hasattr(row, "asDict") else dict(row)
            id_, version, payload = (get[c] for c in COLUMNS)
        except (KeyError, TypeError, ValueError) as exc:
            raise BadRowError(f"row {row!r} lacks one of the columns {COLUMNS}: {exc}") from None
        if id_ is None:
            raise BadRowError("row with a NULL id rejected (id is the primary key)")
        if not isinstance(id_, str):
            raise BadRowError(f"row with id {id_!r} rejected: id must be a string", key=id_)
        if "\x00" in id_ or (isinstance(payload, str) and "\x00" in payload):
            raise BadRowError(f"row with id {id_[:80]!r} rejected: text contains NUL, "
                              "which Postgres text cannot store", key=id_)
        if version is None or isinstance(version, bool) or not isinstance(version, int):
            raise BadRowError(f"row with id {id_[:80]!r} rejected: version must be a non-null integer, "
                              f"got {type(version).__name__}", key=id_)
        if not -2**63 <= version < 2**63:
            raise BadRowError(f"row with id {id_[:80]!r} rejected: version out of bigint range", key=id_)
        if payload is not None and not isinstance(payload, str):
            raise BadRowError(f"row with id {id_[:80]!r} rejected: payload must be a string or NULL", key=id_)
        return id_, version, payload

    def _raise_pending(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer_loop(self) -> None:
        dwell = self.max_dwell_ms / 1000
        while not self._stop.wait(min(dwell, 0.05) or 0.05):
            with self._lock:
                if self._error is not None:
                    return
                if self._oldest is not None and time.monotonic() - self._oldest >= dwell:
                    try:
                        self._flush()
                    except BaseException as exc:  # kept and raised by process()/close()
                        self._error = exc
                        log.error("events writer: flush failed; the query fails with it: %s", exc)
                        return

    def _flush(self) -> None:
        """Write the buffer as one statement (caller holds the lock). Nothing half-written."""
        if not self._buffer:
            self._oldest = None
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        params = [list(col) for col in zip(*rows)]
        self._with_retries(lambda conn: conn.execute(self._statement, params), "flush", rows)
        self.rows_written += len(rows)
        self._buffer.clear()
        self._oldest = None

    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s,
                                         application_name="events-foreach-writer",
                                         keepalives=1, keepalives_idle=30, keepalives_interval=10,
                                         keepalives_count=3)
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                log.debug("ignoring an error while closing a broken connection", exc_info=True)

    def _with_retries(self, action, what: str, rows: list | None = None):
        attempt = 0
        while True:
            connecting = True
            try:
                conn = self._connect()
                connecting = False
                return action(conn)
            except psycopg.Error as exc:
                if connecting and _is_login_error(exc):
                    self._drop_connection()
                    raise SinkConnectionError(f"cannot log in to Postgres: {_redact(exc, self.dsn)}") from None
                retryable = _is_connection_error(exc) or _is_conflict(exc)
                if retryable and attempt < self.max_retries:
                    attempt += 1
                    if _is_connection_error(exc):
                        self._drop_connection()
                    cap = min(self.backoff_max_ms, self.backoff_initial_ms * 2 ** (attempt - 1)) / 1000
                    delay = cap / 2 + random.uniform(0, cap / 2)
                    log.warning("events writer %s failed (attempt %d of %d), retrying in %.2f s: %s",
                                what, attempt, self.max_retries, delay, _redact(exc, self.dsn))
                    time.sleep(delay)
                    continue
                if retryable:
                    self._drop_connection()
                    raise SinkConnectionError(f"{what} on {self.table} failed after {attempt + 1} attempts: "
                                              f"{_redact(exc, self.dsn)}") from None
                state = exc.sqlstate or ""
                if rows is not None and state.startswith(("22", "23")):
                    raise self._name_bad_row(rows, exc) from None
                raise SinkError(f"{what} on {self.table} failed (not retried): {_redact(exc, self.dsn)}") from None

    def _name_bad_row(self, rows: list, exc: psycopg.Error) -> BadRowError:
        """Find the row Postgres refuses by writing the flush row by row in a rolled-back transaction."""
        conn = self._conn
        if conn is not None and not conn.closed:
            for row in rows:
                try:
                    with conn.transaction(force_rollback=True):
                        conn.execute(self._statement, [[v] for v in row])
                except psycopg.Error as row_exc:
                    return BadRowError(f"row with id {row[0][:80]!r} rejected by {self.table}: "
                                       f"{_redact(row_exc, self.dsn)} [SQLSTATE {row_exc.sqlstate}]; "
                                       "nothing of its flush was written", key=row[0])
        return BadRowError(f"a flush of {len(rows)} rows into {self.table} was rejected: "
                           f"{_redact(exc, self.dsn)}; nothing of it was written")
