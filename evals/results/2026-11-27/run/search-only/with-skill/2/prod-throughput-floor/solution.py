"""High-throughput foreach writer for Postgres table ``events`` (newest version wins).

``EventsWriter(dsn, table)`` returns a picklable PySpark ``foreach`` writer
(``open``/``process``/``close``) for a real-time (or micro-batch) query.

Why it keeps up with a 30,000-row burst per task
------------------------------------------------
* **One statement per flush, whatever its row count.** Rows are buffered and
  written as a single set-based upsert fed by one array parameter per column,
  sent in psycopg's binary format::

      INSERT INTO events AS t (id, version, payload)
      SELECT u.c0, u.c1, u.c2 FROM unnest(%b::text[], %b::bigint[], %b::text[]) AS u(c0, c1, c2)
      ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, payload = EXCLUDED.payload
      WHERE t.version IS NULL OR t.version < EXCLUDED.version

  One round trip and one transaction per ``max_batch_rows`` (default 5,000)
  rows: no per-row statement, no per-row commit, no per-row round trip. (The
  skill pack measured this unnest upsert at ~0.7x a raw ``COPY`` into an
  unindexed table and ~0.8x a ``COPY`` into the same keyed table, and faster
  than ``executemany`` in pipeline mode; a row-at-a-time INSERT+COMMIT is
  ~300x slower.)
* **Writing overlaps reading.** A flusher thread owns the connection and writes
  a full buffer while ``process()`` keeps filling the next one (back-pressure:
  at most one batch waits behind the one being written).
* **Idempotent and ordered.** Inside a buffer each id keeps its highest version
  (one statement never touches a key twice, which ``ON CONFLICT DO UPDATE``
  forbids); a batch is sent sorted by id, so concurrent tasks lock rows in the
  same order and cannot deadlock; the version guard makes Spark's at-least-once
  replays (a whole long batch in real-time mode) harmless: an older or equal
  version never overwrites a newer one.
* **Real-time mode.** ``close()`` runs only at the end of each long batch, so the
  flusher also writes the buffer when its oldest row is ``max_dwell_ms``
  (default 100 ms) old, even if no further row arrives.
* **Failures.** Lost connections, server restarts, deadlocks and serialization
  failures are retried with bounded, jittered backoff (reconnect first where
  needed); a row Postgres refuses fails the task with an error naming its id
  (found by replaying the batch row by row in a rolled-back transaction);
  ``open()`` raises and never returns ``False``.

Column types come from the catalog at ``open()``: each array parameter is cast
to the column's type without its modifier (domains resolved, ``bpchar`` for
``char(n)``), so no cast narrows a value; array-typed columns travel as text.

Requires ``psycopg`` 3 on the executors.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Optional

log = logging.getLogger("events_writer")

_COLUMNS_QUERY = """
SELECT a.attname,
       format_type(COALESCE(NULLIF(bt.typbasetype, 0), bt.oid), -1) AS cast_type,
       (t2.typcategory = 'A') AS is_array
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type bt ON bt.oid = a.atttypid
JOIN pg_catalog.pg_type t2 ON t2.oid = COALESCE(NULLIF(bt.typbasetype, 0), bt.oid)
WHERE c.relname = %(table)s
  AND n.nspname = COALESCE(%(schema)s, current_schema())
  AND c.relkind IN ('r', 'p')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

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


def _split_table(table: str):
    parts = [p.strip('"') if p.startswith('"') else p.lower() for p in table.split(".")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


class EventsWriter:
    """Picklable PySpark ``foreach`` writer: set-based upserts (newest version wins) at bulk-load speed."""

    def __init__(self, dsn: str, table: str = "events", key_column: str = "id",
                 version_column: Optional[str] = "version", max_batch_rows: int = 5000,
                 max_dwell_ms: int = 100, max_retries: int = 6, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        self.dsn = dsn
        self.table = table
        self.schema_name, self.table_name = _split_table(table)
        self.key_column = key_column
        self.version_column = version_column
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = int(backoff_initial_ms)
        self.backoff_max_ms = int(backoff_max_ms)
        self.connect_timeout_s = int(connect_timeout_s)
        self._reset()

    _CONFIG = ("dsn", "table", "schema_name", "table_name", "key_column", "version_column",
               "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_initial_ms", "backoff_max_ms",
               "connect_timeout_s")

    def __getstate__(self):
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._reset()

    def __repr__(self):
        return f"EventsWriter(table={self.table!r})"

    def _reset(self):
        self._conn = None
        self._cond = threading.Condition()
        self._buffer: dict = {}        # id -> row tuple (highest version)
        self._oldest: Optional[float] = None
        self._pending: Optional[list] = None   # a full batch handed to the flusher
        self._writing = False
        self._stopping = False
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._columns: Optional[list] = None
        self._casts: dict = {}
        self._arrays: set = set()
        self._statement = None
        self._key_i = 0
        self._ver_i: Optional[int] = None
        self._open = False
        self.rows_written = 0
        self.flushes = 0

    # ---- foreach contract -------------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        """Connect (with retries), read the column types, start the flusher. Never returns False."""
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect_with_retries()
        rows = self._conn.execute(_COLUMNS_QUERY, {"table": self.table_name,
                                                   "schema": self.schema_name}).fetchall()
        if not rows:
            self._close_conn()
            raise SinkError(f"table {self.table!r} not found")
        self._casts = {r[0]: r[1] for r in rows}
        self._arrays = {r[0] for r in rows if r[2]}
        self._open = True
        self._thread = threading.Thread(target=self._flusher, daemon=True, name=f"events-flusher-p{partition_id}")
        self._thread.start()
        return True

    def process(self, row):
        if not self._open:
            raise SinkError("process() called on a writer that is not open; the row was not written")
        values = self._values(row)
        key = values[self._key_i]
        if key is None:
            raise SinkError(f"row with a NULL {self.key_column} cannot be upserted")
        with self._cond:
            if self._error is not None:
                raise self._error
            kept = self._buffer.get(key)
            if kept is None or self._newer(values, kept):
                if not self._buffer:
                    self._oldest = time.monotonic()
                self._buffer[key] = values
            if len(self._buffer) >= self.max_batch_rows:
                while self._pending is not None and self._error is None:  # back-pressure
                    self._cond.wait()
                if self._error is not None:
                    raise self._error
                self._pending, self._buffer, self._oldest = list(self._buffer.values()), {}, None
                self._cond.notify_all()

    def close(self, error):
        if not self._open:
            return
        self._open = False
        with self._cond:
            if error is not None:  # Spark replays the epoch: drop what is unwritten
                self._buffer, self._pending = {}, None
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._close_conn()
        if error is None and self._error is not None:
            raise self._error
        log.info("events sink closed: %d rows in %d flushes", self.rows_written, self.flushes)

    # ---- flusher thread: the only user of the connection after open() ------------------------
    def _flusher(self):
        dwell = self.max_dwell_ms / 1000.0
        while True:
            with self._cond:
                while True:
                    if self._error is not None:
                        return
                    if self._pending is not None:
                        batch, self._pending = self._pending, None
                        break
                    age = time.monotonic() - self._oldest if self._oldest is not None else None
                    if self._buffer and (self._stopping or (dwell > 0 and age >= dwell)):
                        batch, self._buffer, self._oldest = list(self._buffer.values()), {}, None
                        break
                    if self._stopping:
                        return
                    timeout = None if age is None or dwell <= 0 else max(dwell - age, 0.001)
                    self._cond.wait(timeout if timeout is not None else 0.5)
                self._writing = True
                self._cond.notify_all()  # a process() waiting on back-pressure may go on
            try:
                self._write(batch)
            except BaseException as exc:
                log.error("postgres sink: flush failed, nothing more is written: %s", exc)
                with self._cond:
                    self._error = exc
                    self._writing = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._writing = False
                self._cond.notify_all()

    def _write(self, batch: list):
        batch.sort(key=lambda r: r[self._key_i])
        arrays = [list(col) for col in zip(*batch)]
        for i, c in enumerate(self._columns):
            if c in self._arrays:  # unnest would flatten arrays of arrays: send their text form
                arrays[i] = [None if v is None else _array_text(v) for v in arrays[i]]
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect_with_retries()
                self._conn.execute(self._statement, arrays)   # autocommit: one statement = one transaction
                break
            except SinkError:
                raise
            except Exception as exc:
                kind = _kind(exc)
                if kind == "bad_row":
                    raise self._name_bad_row(batch, exc) from None
                if kind == "permanent" or attempt >= self.max_retries:
                    raise SinkError(f"flush of {len(batch)} row(s) to {self.table!r} failed after "
                                    f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}",
                                    _sqlstate(exc)) from None
                if kind == "reconnect":
                    self._close_conn()
                self._sleep(attempt)
                attempt += 1
        self.rows_written += len(batch)
        self.flushes += 1

    def _name_bad_row(self, batch: list, exc: BaseException) -> SinkError:
        """Replay the batch row by row in a transaction that is always rolled back; name the bad row."""
        try:
            with self._conn.transaction(force_rollback=True):
                for r in batch:
                    one = [[v] for v in r]
                    for i, c in enumerate(self._columns):
                        if c in self._arrays and r[i] is not None:
                            one[i] = [_array_text(r[i])]
                    try:
                        with self._conn.transaction():
                            self._conn.execute(self._statement, one)
                    except Exception as row_exc:
                        if _kind(row_exc) != "bad_row":
                            raise
                        return SinkError(f"row with {self.key_column}={r[self._key_i]!r} rejected by "
                                         f"{self.table!r}: {row_exc} [SQLSTATE {_sqlstate(row_exc)}]; nothing of "
                                         "its flush was written", _sqlstate(row_exc))
        except Exception:
            log.debug("finding the bad row failed", exc_info=True)
        return SinkError(f"flush to {self.table!r} failed: {type(exc).__name__}: {exc}; nothing of it was "
                         "written", _sqlstate(exc))

    # ---- helpers ------------------------------------------------------------------------------
    def _newer(self, values: tuple, kept: tuple) -> bool:
        if self._ver_i is None:
            return True  # no version column: last row wins
        new, old = values[self._ver_i], kept[self._ver_i]
        if new is None:
            return old is None
        return old is None or new > old

    def _values(self, row) -> tuple:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if self._columns is None:
            unknown = [c for c in data if c not in self._casts]
            if unknown:
                raise SinkError(f"row field(s) {unknown} are not columns of {self.table!r}")
            if self.key_column not in data:
                raise SinkError(f"rows must carry the key column {self.key_column!r}")
            self._columns = list(data)
            self._key_i = self._columns.index(self.key_column)
            self._ver_i = self._columns.index(self.version_column) \
                if self.version_column and self.version_column in data else None
            self._statement = self._upsert_statement()
        try:
            return tuple(data[c] for c in self._columns)
        except KeyError as exc:
            raise SinkError(f"row is missing column {exc.args[0]!r}") from None

    def _upsert_statement(self):
        import psycopg
        from psycopg import sql

        binary = sql.Placeholder(format=psycopg.adapt.PyFormat.BINARY)
        target = sql.Identifier(self.schema_name, self.table_name) if self.schema_name \
            else sql.Identifier(self.table_name)
        aliases = [sql.Identifier(f"c{i}") for i in range(len(self._columns))]
        params, picks = [], []
        for c, alias in zip(self._columns, aliases):
            if c in self._arrays:
                params.append(sql.SQL("{}::text[]").format(binary))
                picks.append(sql.SQL("u.{}::{}").format(alias, sql.SQL(self._casts[c])))
            else:
                params.append(sql.SQL("{}::{}[]").format(binary, sql.SQL(self._casts[c])))
                picks.append(sql.SQL("u.{}").format(alias))
        updates = [c for c in self._columns if c != self.key_column]
        statement = sql.SQL("INSERT INTO {t} AS t ({cols}) SELECT {picks} FROM unnest({params}) AS u({aliases}) "
                            "ON CONFLICT ({key}) ").format(
            t=target, cols=sql.SQL(", ").join(sql.Identifier(c) for c in self._columns),
            picks=sql.SQL(", ").join(picks), params=sql.SQL(", ").join(params),
            aliases=sql.SQL(", ").join(aliases), key=sql.Identifier(self.key_column))
        if not updates:
            return statement + sql.SQL("DO NOTHING")
        statement += sql.SQL("DO UPDATE SET ") + sql.SQL(", ").join(
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates)
        if self._ver_i is not None:
            statement += sql.SQL(" WHERE t.{v} IS NULL OR t.{v} < EXCLUDED.{v}").format(
                v=sql.Identifier(self.version_column))
        return statement

    def _connect_with_retries(self):
        import psycopg

        attempt = 0
        while True:
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s,
                                       application_name="spark-events-sink")
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

    def _close_conn(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def _array_text(value: Any) -> str:
    """A Python list as Postgres array text, by psycopg's own text dumper."""
    from psycopg.adapt import PyFormat, Transformer

    return bytes(Transformer().get_dumper(value, PyFormat.TEXT).dump(value)).decode("utf-8")


__all__ = ["EventsWriter", "SinkError"]
