"""A PySpark foreach writer that upserts (id, version, payload) rows into Postgres, newest version wins.

    table: <table>(id text primary key, version bigint, payload text)

    query = df.writeStream.foreach(EventsWriter(dsn, "public.events")) \
              .outputMode("update").trigger(realTime="5 minutes") \
              .option("checkpointLocation", ckpt).start()

What real-time mode (or any Structured Streaming restart) does to a foreach sink, and how this writer
copes with it:

* Replayed epochs (a failed task/epoch is re-executed from the last checkpoint, so rows already written
  are written again): every write is an idempotent upsert, replaying changes nothing.
* Late replays of older versions, rows out of order: the upsert is version guarded
  (ON CONFLICT ... DO UPDATE ... WHERE stored.version < incoming.version), so an older or equal version
  never overwrites a newer one, whatever the arrival order; inside one flush, rows are first collapsed
  to the newest version per id.
* Hostile values: the table name is quoted with psycopg.sql.Identifier (never formatted into SQL), values
  are bound parameters; values Postgres cannot store (NUL characters, non-UTF-8 text, a version that is
  not a 64-bit integer, a null id) are rejected with a ValueError/TypeError naming the row - the task
  fails loudly instead of writing a mangled row or dropping it.
* Postgres restart / dropped connection / deadlock / serialization failure: transient errors are retried
  with exponential backoff on a fresh connection; the whole pending batch is re-sent (safe, idempotent).
* Unreachable server: bounded connect timeout and bounded retries, then the error is raised
  (the Spark task fails and Spark's task retry / query restart takes over) - it never hangs forever and
  never reports success for rows that were not committed.
* No silent loss, no swallowed error: a row is only dropped from the buffer after its transaction
  committed; close(None) flushes and raises on failure; close(error) discards the uncommitted buffer
  (Spark is already failing that task with `error` and will replay those rows) and never masks `error`.
"""

import random
import time

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

_BIGINT_MIN = -(2 ** 63)
_BIGINT_MAX = 2 ** 63 - 1

# Errors after which the same statements may succeed on a new connection / new attempt.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)
# OperationalError subclasses that are *not* worth retrying (bad configuration, not a blip).
_PERMANENT_OPERATIONAL = (
    pg_errors.InvalidPassword,
    pg_errors.InvalidAuthorizationSpecification,
    pg_errors.InsufficientPrivilege,
)


def _check_text(value, what, row_id):
    if "\x00" in value:
        raise ValueError(f"{what} of row id={row_id!r} contains a NUL character, which Postgres text cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{what} of row id={row_id!r} is not valid UTF-8 text: {e}") from None


class EventsWriter:
    """Foreach writer: open(partition_id, epoch_id) / process(row) / close(error)."""

    def __init__(self, dsn, table, *, max_batch_rows=500, max_delay_s=0.0, max_attempts=6,
                 backoff_s=0.2, max_backoff_s=5.0, connect_timeout_s=5, statement_timeout_ms=30000):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty connection string")
        if not isinstance(table, str) or not table or "\x00" in table:
            raise ValueError(f"invalid table name {table!r}")
        parts = table.split(".")
        if len(parts) > 2 or any(p == "" for p in parts):
            raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
        self.dsn = dsn
        self.table = table
        self._table_parts = tuple(parts)
        # Latency first: with max_delay_s=0 every row is committed as soon as process() sees it.
        # Raise max_delay_s (e.g. 0.01) to group rows that arrive together into one transaction.
        self.max_batch_rows = int(max_batch_rows)
        self.max_delay_s = float(max_delay_s)
        self.max_attempts = int(max_attempts)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.connect_timeout_s = int(connect_timeout_s)
        self.statement_timeout_ms = int(statement_timeout_ms)
        self._conn = None
        self._pending = {}
        self._first_pending_at = None

    # ---- Spark foreach lifecycle --------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self._pending = {}
        self._first_pending_at = None
        self.rows_written = 0
        self.rows_superseded = 0
        self._conn = None
        self._with_retries(lambda conn: None)   # connect now: an unreachable server fails the task early
        return True                         # always process: replays are handled by idempotency

    def process(self, row):
        row_id, version, payload = self._validate(row)
        current = self._pending.get(row_id)
        if current is None or current[0] < version:
            self._pending[row_id] = (version, payload)
        if self._first_pending_at is None:
            self._first_pending_at = time.monotonic()
        if (len(self._pending) >= self.max_batch_rows
                or time.monotonic() - self._first_pending_at >= self.max_delay_s):
            self._flush()

    def close(self, error):
        try:
            if error is None:
                self._flush()        # raises if the rows could not be committed
            else:
                # The task already failed with `error`; Spark re-runs the epoch and re-sends these rows.
                self._pending = {}
        finally:
            self._disconnect()

    # ---- internals ----------------------------------------------------------------------------
    @staticmethod
    def _field(row, name):
        try:
            return row[name]
        except (KeyError, ValueError, IndexError, TypeError):
            value = getattr(row, name, _MISSING)
            if value is _MISSING:
                raise ValueError(f"row has no field {name!r}: {row!r}") from None
            return value

    def _validate(self, row):
        row_id = self._field(row, "id")
        version = self._field(row, "version")
        payload = self._field(row, "payload")
        if row_id is None:
            raise ValueError(f"row with null id cannot be upserted: {row!r}")
        if not isinstance(row_id, str):
            raise TypeError(f"id must be a string, got {type(row_id).__name__}: {row_id!r}")
        _check_text(row_id, "id", row_id)
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"version of row id={row_id!r} must be an integer, got {version!r}")
        if not _BIGINT_MIN <= version <= _BIGINT_MAX:
            raise ValueError(f"version of row id={row_id!r} does not fit in bigint: {version!r}")
        if payload is not None:
            if not isinstance(payload, str):
                raise TypeError(f"payload of row id={row_id!r} must be a string or None, got {type(payload).__name__}")
            _check_text(payload, "payload", row_id)
        return row_id, version, payload

    def _upsert_sql(self):
        return sql.SQL(
            "INSERT INTO {tbl} AS t (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version IS NULL OR t.version < EXCLUDED.version"
        ).format(tbl=sql.Identifier(*self._table_parts))

    def _connect(self):
        conn = psycopg.connect(self.dsn, connect_timeout=self.connect_timeout_s, autocommit=False,
                               application_name="spark-events-writer")
        try:
            conn.execute("SET statement_timeout = %s" % int(self.statement_timeout_ms))
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def _disconnect(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass  # closing a broken connection; nothing is pending on it (rolled back by the server)

    def _with_retries(self, work):
        """Run work(conn) with a live connection; retry transient failures on a new connection."""
        attempt = 0
        while True:
            attempt += 1
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                return work(self._conn)
            except _PERMANENT_OPERATIONAL:
                self._disconnect()
                raise
            except _TRANSIENT as e:
                self._disconnect()
                if attempt >= self.max_attempts:
                    raise RuntimeError(
                        f"EventsWriter: Postgres still failing after {attempt} attempts "
                        f"(partition {getattr(self, 'partition_id', '?')}, epoch {getattr(self, 'epoch_id', '?')}, "
                        f"{len(self._pending)} uncommitted rows; failing the task so Spark re-delivers them): "
                        f"{type(e).__name__}: {e}") from e
                delay = min(self.max_backoff_s, self.backoff_s * (2 ** (attempt - 1)))
                time.sleep(delay * (0.5 + random.random() / 2))

    def _flush(self):
        if not self._pending:
            return
        # newest version per id already; sorted ids give concurrent tasks the same lock order
        batch = sorted((k, v[0], v[1]) for k, v in self._pending.items())
        stmt = self._upsert_sql()

        def write(conn):
            try:
                with conn.cursor() as cur:
                    cur.executemany(stmt, batch)
                conn.commit()
            except BaseException:
                if not conn.closed:
                    try:
                        conn.rollback()
                    except Exception:
                        pass
                raise

        self._with_retries(write)
        # only now, after COMMIT succeeded, are the rows forgotten
        self.rows_written += len(batch)
        self._pending = {}
        self._first_pending_at = None


_MISSING = object()
