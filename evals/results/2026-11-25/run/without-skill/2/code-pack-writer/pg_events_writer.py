"""A hardened PySpark foreach writer that upserts (id, version, payload) rows into Postgres.

Target table (created by you, not by the writer):

    CREATE TABLE <table> (id text PRIMARY KEY, version bigint NOT NULL, payload text);

Usage:

    query = (df.select("id", "version", "payload").writeStream
               .foreach(EventsWriter(dsn, "public.events"))
               .outputMode("update")
               .option("checkpointLocation", checkpoint)
               .trigger(realTime="5 minutes")
               .start())

What real-time mode does to a sink, and how this writer copes
-------------------------------------------------------------
* Replayed epochs.  Offsets are committed at the end of a (long) batch; after a failure the batch is
  re-run from the last committed offsets, so rows already written are delivered again.  The write is
  an idempotent, version-guarded upsert:

      INSERT ... ON CONFLICT (id) DO UPDATE SET ... WHERE <table>.version < EXCLUDED.version

  Re-applying a row is a no-op, so replays are harmless.
* Late replays of older versions / rows out of order.  The same WHERE guard means an older (or equal)
  version never overwrites a newer one: the newest version wins whatever the arrival order.
* Hostile values.  Everything is sent as bound parameters (no SQL built from data); the table name is
  quoted with psycopg.sql.Identifier.  Values Postgres cannot store (NUL characters, lone surrogates,
  version outside bigint, wrong types, null id / version) are rejected *loudly*: by default the task
  fails with a clear error naming the row.  Optionally (dead_letter_table=...) such rows are recorded
  in a dead-letter table instead - never dropped silently.
* Postgres restart / dropped connection.  Connection-level failures (SQLSTATE class 08, admin/crash
  shutdown 57P01/57P02, cannot_connect_now 57P03, serialization/deadlock 40001/40P01, broken socket)
  are retried with capped exponential backoff on a fresh connection.  Retrying is safe because the
  statement is idempotent (if the first attempt did commit, the retry is a no-op).
* Unreachable server.  After `max_attempts` failed attempts the writer raises; the task and the query
  fail visibly and the rows are replayed after restart (their offsets were never committed).
* No error swallowed.  Data errors (constraint, type, size...) are never retried and always raised.
  close(error) never masks the original error; a failure while closing after a clean run is raised.

Latency: each row is written and committed as soon as process() receives it (autocommit, one round
trip), because in real-time mode close() only runs at the end of a long batch - buffering until close
would hold rows for minutes.
"""

import logging
import numbers
import random
import time

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

BIGINT_MIN = -(2 ** 63)
BIGINT_MAX = 2 ** 63 - 1

# SQLSTATEs worth retrying on a fresh connection (besides every class-08 code).
_RETRYABLE_SQLSTATES = {
    "57P01",  # admin_shutdown (e.g. server restart)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (server starting up / in recovery)
    "53300",  # too_many_connections
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
}


class InvalidRowError(ValueError):
    """A row that cannot be stored as-is (raised, never dropped silently)."""


class SinkUnavailableError(RuntimeError):
    """Postgres could not be reached / written after all retry attempts."""


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        sqlstate = getattr(exc, "sqlstate", None)
        # No SQLSTATE = client-side connection failure (refused, reset, timeout, closed socket).
        if sqlstate is None or sqlstate.startswith("08") or sqlstate in _RETRYABLE_SQLSTATES:
            return True
        return False
    sqlstate = getattr(exc, "sqlstate", None)
    return sqlstate in _RETRYABLE_SQLSTATES


def _parse_table(table):
    """'events' | 'schema.events' | ('schema', 'events') -> psycopg.sql.Identifier."""
    if isinstance(table, (tuple, list)):
        parts = tuple(table)
    elif isinstance(table, str):
        parts = tuple(table.split("."))
    else:
        raise TypeError(f"table must be a str or a tuple of str, got {type(table).__name__}")
    if not 1 <= len(parts) <= 2 or any(not isinstance(p, str) or not p or "\x00" in p
                                       for p in parts):
        raise ValueError(f"invalid table name: {table!r}")
    return parts


def _check_text(name, value, row_id):
    if "\x00" in value:
        raise InvalidRowError(f"row id={row_id!r}: {name} contains a NUL character, "
                              "which Postgres text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRowError(f"row id={row_id!r}: {name} is not valid Unicode ({exc})") from exc


def _field(row, name):
    if isinstance(row, dict):
        return row[name]
    try:
        return row[name]            # pyspark.sql.Row supports access by field name
    except (KeyError, TypeError, ValueError, IndexError):
        return getattr(row, name)


class EventsWriter:
    """Foreach writer: version-guarded upsert of (id, version, payload) into Postgres."""

    def __init__(self, dsn, table, *, max_attempts=8, base_backoff_s=0.2, max_backoff_s=10.0,
                 connect_timeout_s=10, statement_timeout_ms=30_000, dead_letter_table=None,
                 application_name="spark-events-writer"):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty connection string")
        if int(max_attempts) < 1:
            raise ValueError("max_attempts must be >= 1")
        self.dsn = dsn
        self.table = table
        self._table_parts = _parse_table(table)
        self._dlq_parts = _parse_table(dead_letter_table) if dead_letter_table else None
        self.max_attempts = int(max_attempts)
        self.base_backoff_s = float(base_backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.connect_timeout_s = int(connect_timeout_s)
        self.statement_timeout_ms = int(statement_timeout_ms)
        self.application_name = application_name
        # per-task state, created in open(); nothing unpicklable is created here
        self._conn = None
        self.partition_id = None
        self.epoch_id = None
        self.rows_seen = 0
        self.rows_applied = 0
        self.rows_stale = 0
        self.rows_dead_lettered = 0

    # ------------------------------------------------------------------ SQL
    def _upsert_sql(self):
        t = sql.Identifier(*self._table_parts)
        return sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version < EXCLUDED.version"
        ).format(t=t)

    def _dead_letter_sql(self):
        t = sql.Identifier(*self._dlq_parts)
        return sql.SQL(
            "INSERT INTO {t} (partition_id, epoch_id, reason, row_repr) VALUES (%s, %s, %s, %s)"
        ).format(t=t)

    # ----------------------------------------------------------- connection
    def _connect(self):
        return psycopg.connect(
            self.dsn,
            autocommit=True,
            connect_timeout=self.connect_timeout_s,
            application_name=self.application_name,
            options=f"-c statement_timeout={self.statement_timeout_ms}",
        )

    def _drop_connection(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection; the real error is handled by caller
                log.debug("ignoring error while closing a broken connection", exc_info=True)

    def _backoff(self, attempt):
        delay = min(self.max_backoff_s, self.base_backoff_s * (2 ** (attempt - 1)))
        time.sleep(delay * (0.5 + random.random() / 2))

    def _run(self, what, fn):
        """Run fn(conn) with reconnect + retry on transient failures; raise everything else."""
        last = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                return fn(self._conn)
            except Exception as exc:  # classified below; nothing is swallowed
                if not _is_retryable(exc):
                    raise
                last = exc
                self._drop_connection()
                log.warning("partition %s epoch %s: %s failed (attempt %d/%d): %s",
                            self.partition_id, self.epoch_id, what, attempt, self.max_attempts, exc)
                if attempt < self.max_attempts:
                    self._backoff(attempt)
        raise SinkUnavailableError(
            f"partition {self.partition_id} epoch {self.epoch_id}: {what} failed after "
            f"{self.max_attempts} attempts; last error: {last!r}") from last

    # ------------------------------------------------------------- validate
    def _validate(self, row):
        try:
            row_id = _field(row, "id")
            version = _field(row, "version")
            payload = _field(row, "payload")
        except Exception as exc:
            raise InvalidRowError(f"row {row!r} lacks id/version/payload: {exc}") from exc
        if row_id is None:
            raise InvalidRowError(f"row {row!r}: id is null")
        if not isinstance(row_id, str):
            raise InvalidRowError(f"row {row!r}: id must be a string, got {type(row_id).__name__}")
        _check_text("id", row_id, row_id)
        if version is None:
            raise InvalidRowError(f"row id={row_id!r}: version is null (cannot order versions)")
        if isinstance(version, bool) or not isinstance(version, numbers.Integral):
            raise InvalidRowError(
                f"row id={row_id!r}: version must be an integer, got {type(version).__name__}")
        version = int(version)
        if not BIGINT_MIN <= version <= BIGINT_MAX:
            raise InvalidRowError(f"row id={row_id!r}: version {version} is outside bigint range")
        if payload is not None:
            if not isinstance(payload, str):
                raise InvalidRowError(
                    f"row id={row_id!r}: payload must be a string or null, "
                    f"got {type(payload).__name__}")
            _check_text("payload", payload, row_id)
        return row_id, version, payload

    # ------------------------------------------------------ ForeachWriter API
    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self.rows_seen = self.rows_applied = self.rows_stale = self.rows_dead_lettered = 0
        self._upsert = self._upsert_sql()
        self._dlq = self._dead_letter_sql() if self._dlq_parts else None
        # Connect eagerly so an unreachable server fails the task now (after retries), not silently.
        # open() is outside Spark's try/finally, so clean up ourselves if it fails.
        try:
            self._run("connect", lambda conn: None)
        except BaseException:
            self._drop_connection()
            raise
        return True  # always process: replays are made harmless by the idempotent upsert

    def process(self, row):
        self.rows_seen += 1
        try:
            values = self._validate(row)
        except InvalidRowError as bad:
            if self._dlq is None:
                raise
            self._run("dead-letter write", lambda conn: conn.execute(
                self._dlq, (self.partition_id, self.epoch_id, str(bad), repr(row))))
            self.rows_dead_lettered += 1
            log.error("partition %s epoch %s: dead-lettered row: %s",
                      self.partition_id, self.epoch_id, bad)
            return
        try:
            cur = self._run("upsert", lambda conn: conn.execute(self._upsert, values))
        except SinkUnavailableError:
            raise
        except Exception as exc:
            # Non-retryable database error: surface it with the row id, keep the original chained.
            raise RuntimeError(
                f"partition {self.partition_id} epoch {self.epoch_id}: upsert of id={values[0]!r} "
                f"version={values[1]} failed: {exc}") from exc
        if cur.rowcount == 1:
            self.rows_applied += 1
        else:  # an equal or newer version is already stored: intended no-op (replay / late row)
            self.rows_stale += 1

    def close(self, error):
        try:
            if error is None:
                log.info("partition %s epoch %s: %d rows seen, %d applied, %d stale/replayed, "
                         "%d dead-lettered", self.partition_id, self.epoch_id, self.rows_seen,
                         self.rows_applied, self.rows_stale, self.rows_dead_lettered)
        finally:
            if error is None:
                # Clean run: a failure to close is a real problem -> raise it.
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()
            else:
                # Spark re-raises `error` after close(); never mask it with a close failure.
                self._drop_connection()
