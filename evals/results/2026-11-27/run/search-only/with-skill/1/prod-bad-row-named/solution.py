"""Foreach writer for ``readings`` that fails loudly and names the offending row's id.

Usage (real-time mode, PySpark)::

    from solution import ReadingsWriter

    query = (df.writeStream
             .foreach(ReadingsWriter(dsn, "readings"))
             .outputMode("update")                    # the only output mode real-time mode accepts
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")           # checkpoint interval, not a latency target
             .start())

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``), so the
  at-least-once replay of a failed long batch is harmless.
* A bad row is **never** dropped, truncated or cleaned: the writer raises
  :class:`BadReadingError`, whose message starts with ``bad row id=<repr of
  the id>`` and gives the column and the reason (Postgres' own message and
  SQLSTATE when Postgres refused it). The Spark task fails with that message,
  and so does the query (``StreamingQueryException``), so on-call sees which
  row broke it. The same line is logged at ERROR on the executor at once
  (logger ``readings_writer``).
* Rows that arrived **before** the bad row stay written: earlier flushes are
  already committed, and when the bad row is found, the rows buffered ahead of
  it (in arrival order) are committed before the error is raised. Rows after
  it are not written; the failed task/epoch is replayed after the fix.

Two kinds of garbage
--------------------
1. Found in Python before anything is sent (no guessing, only what Postgres
   would certainly refuse): a null id, NUL characters in ``id``/``sensor``/
   ``note`` (Postgres text cannot hold U+0000 and psycopg refuses it), a null
   ``sensor`` (NOT NULL), a NaN ``score`` (the CHECK ``score <> 'NaN'``), a
   value of the wrong type.
2. Found by Postgres: anything else the table refuses, e.g. an absurdly long
   id (``54000 index row size ... exceeds btree maximum``; the exact limit
   depends on compression, so only Postgres can tell), other constraints a DBA
   adds later. The failed flush is rolled back and replayed row by row in
   arrival order, each row under its own SAVEPOINT; the first row Postgres
   refuses is named, the rows before it are committed.

Transient failures (lost connection, server restart, deadlock, serialization
failure) are retried with bounded, jittered backoff; they are not bad rows.

Real-time mode calls ``open()``/``close()`` only once per long batch, so the
writer flushes from ``process()`` (``max_batch_rows`` distinct ids) and from a
timer thread (``max_dwell_ms``), not only in ``close()``. An error of the timer
thread is logged at once and raised by the next ``process()`` or by
``close()``. ``open()`` never returns ``False``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any

log = logging.getLogger("readings_writer")

#: (column, cast); casts are the plain column types, so nothing is narrowed by a cast.
COLUMNS: tuple[tuple[str, str], ...] = (("id", "text"), ("sensor", "text"),
                                         ("score", "double precision"), ("note", "text"))
KEY = "id"
_NAMES = tuple(c for c, _ in COLUMNS)

#: SQLSTATE classes / codes that mean "this data cannot be stored" (never retried).
_BAD_ROW_CLASSES = ("22", "23", "54")
_BAD_ROW_CODES = ("21000", "42804", "42846")
#: SQLSTATEs retried on the same connection.
_RETRY_CODES = ("40001", "40P01")


class BadReadingError(ValueError):
    """A row the table cannot hold. ``key`` is the row's id, ``column`` the column when known."""

    def __init__(self, key: Any, column: str | None, reason: str, sqlstate: str | None = None) -> None:
        self.key = key
        self.column = column
        self.reason = reason
        self.sqlstate = sqlstate
        where = f" column {column}" if column else ""
        state = f" [SQLSTATE {sqlstate}]" if sqlstate else ""
        super().__init__(f"bad row id={key!r}:{where} {reason}{state}; the row was not written "
                         "(nothing dropped, truncated or cleaned); rows before it are committed")


def _table_identifier(table: str):
    """``readings``, ``schema.readings`` or ``"Quoted"."Name"`` as SQL reads it -> psycopg Identifier."""
    from psycopg import sql

    parts: list[str] = []
    rest = table.strip()
    while rest:
        if rest.startswith('"'):
            end, name = 1, []
            while True:
                nxt = rest.find('"', end)
                if nxt < 0:
                    raise ValueError(f"unterminated quoted identifier in table name {table!r}")
                name.append(rest[end:nxt])
                if rest[nxt + 1:nxt + 2] == '"':
                    name.append('"')
                    end = nxt + 2
                    continue
                rest = rest[nxt + 1:]
                break
            parts.append("".join(name))
        else:
            dot = rest.find(".")
            parts.append((rest if dot < 0 else rest[:dot]).strip().lower())
            rest = "" if dot < 0 else rest[dot:]
        rest = rest.strip()
        if rest.startswith("."):
            rest = rest[1:].strip()
            if not rest:
                raise ValueError(f"empty name part in table name {table!r}")
        elif rest:
            raise ValueError(f"cannot read table name {table!r}")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _upsert_sql(table: str):
    from psycopg import sql

    updates = [c for c in _NAMES if c != KEY]
    return sql.SQL("INSERT INTO {t} AS t ({cols}) VALUES ({vals}) ON CONFLICT ({k}) DO UPDATE SET {sets} "
                   "WHERE ({old}) IS DISTINCT FROM ({new})").format(
        t=_table_identifier(table),
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in _NAMES),
        vals=sql.SQL(", ").join(sql.SQL("%s::" + cast) for _, cast in COLUMNS),  # constant casts
        k=sql.Identifier(KEY),
        sets=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updates),
        old=sql.SQL(", ").join(sql.SQL("t.{c}::text").format(c=sql.Identifier(c)) for c in updates),
        new=sql.SQL(", ").join(sql.SQL("EXCLUDED.{c}::text").format(c=sql.Identifier(c)) for c in updates))


def _as_dict(row: Any) -> dict:
    if hasattr(row, "asDict"):
        return row.asDict(recursive=False)
    if isinstance(row, dict):
        return row
    if isinstance(row, (tuple, list)) and len(row) == len(_NAMES):
        return dict(zip(_NAMES, row))
    raise BadReadingError(None, None, f"cannot read a row of type {type(row).__name__}")


def _convert(row: Any) -> tuple:
    """Row -> parameter tuple. Refuses (never repairs) what Postgres would certainly refuse."""
    d = _as_dict(row)
    key = d.get(KEY)
    for c in _NAMES:
        if c not in d:
            raise BadReadingError(key, c, "is missing from the row")
    if key is None:
        raise BadReadingError(None, KEY, "is null; the upsert key must be set")
    values = []
    for name, cast in COLUMNS:
        v = d[name]
        if cast == "text":
            if v is None:
                if name == "sensor":
                    raise BadReadingError(key, name, "is null but the column is NOT NULL", "23502")
            elif not isinstance(v, str):
                raise BadReadingError(key, name, f"expects a string, got {type(v).__name__}")
            elif "\x00" in v:
                raise BadReadingError(key, name, f"contains a NUL character at offset {v.index(chr(0))}; "
                                      "Postgres text cannot store U+0000", "22021")
        else:  # double precision
            if v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise BadReadingError(key, name, f"expects a double, got {type(v).__name__}")
                v = float(v)
                if math.isnan(v):
                    raise BadReadingError(key, name, "is NaN, refused by the table's CHECK (score <> 'NaN')",
                                          "23514")
        values.append(v)
    return tuple(values)


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


def _is_bad_row(exc: BaseException) -> bool:
    import psycopg

    state = _sqlstate(exc)
    if state:
        return state[:2] in _BAD_ROW_CLASSES or state in _BAD_ROW_CODES
    # raised by psycopg itself while encoding a value (no SQLSTATE): the data is the problem
    return isinstance(exc, (psycopg.DataError, UnicodeError))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class ReadingsWriter:
    """PySpark ``foreach`` writer; ``ReadingsWriter(dsn, table)`` is the object to pass to ``foreach``."""

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 500, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        _table_identifier(table)  # a bad name fails on the driver, before the query starts
        if max_batch_rows < 1 or max_dwell_ms < 1:
            raise ValueError("max_batch_rows and max_dwell_ms must be >= 1")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self._reset()

    _SETTINGS = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                 "backoff_initial_ms", "backoff_max_ms")

    def _reset(self) -> None:
        self._conn = None
        self._sql = None
        self._buffer: dict[Any, tuple] = {}  # insertion order = arrival order of each id's latest row
        self._oldest: float | None = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._error: BaseException | None = None
        self._opened = False

    def __getstate__(self) -> dict:
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- foreach contract --------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("ReadingsWriter.open() called twice without close()")
        self._sql = _upsert_sql(self.table)
        self._connect_with_retries()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._buffer, self._oldest, self._error = {}, None, None
        self._opened = True
        self._thread = threading.Thread(target=self._timer, name=f"readings-flusher-{partition_id}", daemon=True)
        self._thread.start()
        return True  # never False: Spark would skip the partition's rows silently

    def process(self, row: Any) -> None:
        if not self._opened:
            raise RuntimeError("ReadingsWriter.process() called before open() or after close()")
        self._raise_stored()
        try:
            values = _convert(row)
        except BadReadingError as bad:
            # keep everything that arrived before the bad row, then fail naming it
            with self._lock:
                self._raise_stored()
                self._flush_locked()
            log.error("readings sink: %s", bad)
            raise
        with self._lock:
            self._raise_stored()
            key = values[0]
            self._buffer.pop(key, None)  # last row per id wins, at its latest arrival position
            self._buffer[key] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._opened = False
        self._stop.set()
        self._thread.join(timeout=120)
        try:
            if error is None and self._error is None:
                with self._lock:
                    self._flush_locked()
            self._raise_stored()
        finally:
            self._buffer = {}
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    # -- internals ------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            try:
                with self._lock:
                    if self._error is None and self._oldest is not None and \
                            (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                        self._flush_locked()
            except BaseException as exc:  # raised by the next process() or close()
                self._error = exc
                return

    def _connect(self) -> None:
        import psycopg

        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="readings-foreach-sink")

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * (0.5 + random.random() / 2))

    def _connect_with_retries(self) -> None:
        import psycopg

        for attempt in range(self.max_retries + 1):
            try:
                self._connect()
                return
            except psycopg.OperationalError:
                if attempt == self.max_retries:
                    raise
                self._sleep(attempt)

    def _rollback(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            pass

    def _flush_locked(self) -> None:
        """Write the buffer in one transaction; the caller holds the lock."""
        import psycopg

        if not self._buffer:
            self._oldest = None
            return
        arrival = list(self._buffer.values())
        ordered = sorted(arrival, key=lambda v: v[0])  # sorted ids: concurrent tasks lock in one order
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.executemany(self._sql, ordered)
                self._conn.commit()
                break
            except Exception as exc:
                self._rollback()
                if _is_bad_row(exc):
                    self._write_until_bad_row(arrival, exc)  # raises BadReadingError, or writes all
                    break
                transient = isinstance(exc, psycopg.OperationalError) or _sqlstate(exc) in _RETRY_CODES
                if not transient or attempt == self.max_retries:
                    log.error("readings sink: flush of %d rows failed: %s", len(ordered), _first_line(exc))
                    raise
                log.warning("readings sink: retry %d after %s", attempt + 1, _first_line(exc))
                self._sleep(attempt)
        self._buffer = {}
        self._oldest = None

    def _write_until_bad_row(self, rows: list[tuple], batch_error: BaseException) -> None:
        """Replay ``rows`` in arrival order, one SAVEPOINT each. Commit the rows before the first one
        Postgres refuses and raise naming that row; if none is refused alone, commit them all."""
        with self._conn.cursor() as cur:
            for values in rows:
                cur.execute("SAVEPOINT readings_row")
                try:
                    cur.execute(self._sql, values)
                except Exception as exc:
                    if self._conn.closed:
                        raise
                    cur.execute("ROLLBACK TO SAVEPOINT readings_row")
                    self._conn.commit()  # the rows that came before the bad one stay
                    diag = getattr(exc, "diag", None)
                    column = getattr(diag, "column_name", None)
                    constraint = getattr(diag, "constraint_name", None)
                    reason = f"refused by Postgres: {_first_line(exc)}"
                    if constraint:
                        reason += f" (constraint {constraint})"
                    bad = BadReadingError(values[0], column, reason, _sqlstate(exc))
                    log.error("readings sink: %s", bad)
                    self._buffer = {}
                    self._oldest = None
                    raise bad from exc
                cur.execute("RELEASE SAVEPOINT readings_row")
        self._conn.commit()
        log.warning("readings sink: batch failed (%s) but every row was accepted alone; all committed",
                    _first_line(batch_error))
