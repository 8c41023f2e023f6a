"""Foreach writer for ``readings`` that names the row that broke it, and never hides one.

``ReadingsWriter(dsn, table)`` is a PySpark ``foreach`` writer (``open`` / ``process`` /
``close``) for a real-time query (``.trigger(realTime="5 minutes")``,
``.outputMode("update")``) or a micro-batch one::

    query = (readings.writeStream
             .foreach(ReadingsWriter(dsn, "readings"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")   # checkpoint interval, not a latency target
             .start())

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``), so Spark's at-least-once
  replays are harmless. One row per id is buffered (the later one wins); a buffer is
  flushed when ``max_batch_rows`` ids are waiting (from ``process()``) or its oldest row is
  ``max_dwell_ms`` old (from a timer thread: under real-time mode ``close()`` only comes at
  the end of a long batch).
* A bad row fails the task with :class:`BadReadingError`, whose message starts with the
  offending row's ``id`` (the full id is always in the message, and in ``.row_id``), the
  column, the SQLSTATE when Postgres refused it, and the reason. Nothing is cleaned,
  truncated, replaced or skipped: the writer never strips a NUL, never turns NaN into NULL,
  never cuts an id.
* Rows that arrived before the bad row are written and committed before the error is
  raised (also those in the same buffer); the bad row and anything after it are not written
  (Spark replays them when the query restarts, and the same error comes back until the
  data upstream is fixed).
* ``open()`` never returns ``False`` (Spark would drop the partition's rows silently); a
  connection failure raises.

Checked before sending (so the error is precise and no statement is wasted): ``id`` null,
text with NUL (``\\x00``, which Postgres text cannot hold) or lone surrogates in ``id``,
``sensor`` or ``note``, ``sensor`` null (``NOT NULL``), a ``score`` that is NaN (the table's
CHECK) or not a number. Everything else Postgres decides (an id too long for the primary
key's btree index is SQLSTATE 54000, a check constraint 23514, ...): the failed flush is
rolled back, replayed row by row in arrival order with a savepoint per row, the rows before
the first refused one are committed, and that row is named.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger(__name__)

COLUMNS = ("id", "sensor", "score", "note")
CASTS = ("text", "text", "double precision", "text")
KEY = "id"


class ReadingsSinkError(RuntimeError):
    """The sink could not write (connection lost past the retry budget, setup error)."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


class BadReadingError(ReadingsSinkError):
    """One row cannot be written as it is; ``row_id``, ``column`` and ``sqlstate`` say which and why."""

    def __init__(self, message: str, row_id: Any = None, column: str | None = None, sqlstate: str | None = None):
        super().__init__(message, sqlstate)
        self.row_id, self.column = row_id, column

    def __reduce__(self):  # picklable: the worker's error reaches the driver intact
        return (type(self), (str(self), self.row_id, self.column, self.sqlstate))


def _show(value: Any, limit: int = 120) -> str:
    text = ascii(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(value)} chars)"


def bad_row(row_id: Any, column: str | None, reason: str, sqlstate: str | None = None,
            written_before: int | None = None) -> BadReadingError:
    head = f"bad row id={_show(row_id)}"
    if column:
        head += f" at column {column}"
    if sqlstate:
        head += f" (SQLSTATE {sqlstate})"
    message = f"{head}: {reason}. The row was not written, cleaned or dropped"
    if written_before is not None:
        message += f"; the {written_before} row(s) before it in this flush were committed"
    message += "; fix the data upstream (Spark replays the row on restart)."
    if isinstance(row_id, str) and len(ascii(row_id)) > 120:
        message += f" Full id: {row_id!r}"
    return BadReadingError(message, row_id=row_id, column=column, sqlstate=sqlstate)


def _text_problem(value: str) -> str | None:
    if "\x00" in value:
        return f"text contains a NUL byte (\\x00) at position {value.index(chr(0))}, which Postgres text cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"text is not valid Unicode ({exc.reason} at position {exc.start})"
    return None


def check_row(values: tuple) -> BadReadingError | None:
    """The first problem of one row ``(id, sensor, score, note)``, or None."""
    row_id, sensor, score, note = values
    if row_id is None:
        return bad_row(None, "id", f"id (the primary key) is null; the row: sensor={_show(sensor)}, "
                                   f"score={score!r}, note={_show(note)}")
    if not isinstance(row_id, str):
        return bad_row(row_id, "id", f"id is a {type(row_id).__name__}, not text")
    for name, value in (("id", row_id), ("sensor", sensor), ("note", note)):
        if value is None:
            if name == "sensor":
                return bad_row(row_id, name, "sensor is null but the column is NOT NULL")
            continue
        if not isinstance(value, str):
            return bad_row(row_id, name, f"{type(value).__name__} value {_show(value)} where the column takes text")
        problem = _text_problem(value)
        if problem:
            return bad_row(row_id, name, problem)
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            return bad_row(row_id, "score", f"{type(score).__name__} value {_show(score)} where the column "
                                            "takes a double")
        if isinstance(score, float) and math.isnan(score):
            return bad_row(row_id, "score", "score is NaN, which the table's CHECK (score <> 'NaN') refuses")
    return None


def _split_table(table: str) -> sql.Identifier:
    """'readings', 'schema.readings' (folded to lower case, as SQL does) or '"Schema"."Readings"'."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty name, got {table!r}")
    names, buf, quoted, i, was_quoted = [], "", False, 0, False
    while i < len(table):
        c = table[i]
        if quoted:
            if c == '"' and table[i + 1:i + 2] == '"':
                buf, i = buf + '"', i + 1
            elif c == '"':
                quoted = False
            else:
                buf += c
        elif c == '"':
            quoted = was_quoted = True
        elif c == ".":
            names.append(buf)
            buf, was_quoted = "", False
        else:
            buf += c.lower()
        i += 1
    names.append(buf)
    if quoted or len(names) > 2 or any(not n for n in names):
        raise ValueError(f"cannot read table name {table!r}: use 'table', 'schema.table' or '\"Schema\".\"Table\"'")
    return sql.Identifier(*names)


def _field(row: Any, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        pass
    if hasattr(row, "asDict"):
        d = row.asDict()
        if name in d:
            return d[name]
    raise ReadingsSinkError(f"row has no field {name!r}; the readings writer needs fields {list(COLUMNS)}")


#: SQLSTATE classes/codes that mean "this data cannot go in", never retried.
_BAD_ROW_CLASSES = ("22", "23", "54")
_BAD_ROW_CODES = ("21000", "42804", "42846")
#: Retried: connection problems (reconnect) and conflicts (same connection).
_RECONNECT_CODES = ("57P01", "57P02", "57P03", "25006", "40003")
_CONFLICT_CODES = ("40001", "40P01")


def _is_bad_row(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if state:
        return state[:2] in _BAD_ROW_CLASSES or state in _BAD_ROW_CODES
    # psycopg could not encode a value (no SQLSTATE): a data problem too
    return isinstance(exc, psycopg.DataError)


def _is_transient(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if state:
        return state[:2] == "08" or state in _RECONNECT_CODES or state in _CONFLICT_CODES
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))


class ReadingsWriter:
    """``foreach`` writer: upsert on ``id`` into ``table``; a bad row fails the task naming its id."""

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 5, backoff_initial_ms: int = 250, backoff_max_ms: int = 5000):
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("need max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms, self.max_retries = max_batch_rows, max_dwell_ms, max_retries
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        _split_table(table)  # a bad name fails on the driver, before the query starts
        self._reset()

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms")

    def __getstate__(self) -> dict:  # only the configuration travels to the executors
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password: never shown
        return f"ReadingsWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._buffer: dict[str, tuple] = {}  # id -> values, in arrival order
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.rows_written = 0
        target = _split_table(self.table)
        updates = sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                     for c in COLUMNS if c != KEY)
        self._statement = sql.SQL(
            "INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({key}) DO UPDATE SET {updates}").format(
            t=target, cols=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
            vals=sql.SQL(", ").join(sql.SQL("%s::" + cast) for cast in CASTS),  # constant casts
            key=sql.Identifier(KEY), updates=updates)

    # -- the foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect()
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._tick, daemon=True, name=f"readings-flusher-p{partition_id}")
            self._timer.start()
        return True  # failures raise; never False

    def process(self, row: Any) -> None:
        values = tuple(_field(row, c) for c in COLUMNS)
        problem = check_row(values)
        with self._lock:
            if self._error is not None:
                raise self._error
            if problem is not None:
                # Rows that came before the bad one are written first, then the task fails naming it.
                self._flush_locked()
                self._error = problem
                log.error("readings sink: %s", problem)
                raise problem
            self._buffer.pop(values[0], None)  # one row per id, the later wins (and moves last)
            self._buffer[values[0]] = values
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join()
        try:
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()
                else:  # the task failed (maybe because of a bad row): Spark replays what is unwritten
                    self._buffer.clear()
        finally:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    # -- flushing ------------------------------------------------------------------------------
    def _tick(self) -> None:
        period = max(self.max_dwell_ms / 4000, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None:
                    return
                if self._oldest is not None and (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or close()
                        log.error("readings sink: flush failed, nothing more is written: %s", exc)
                        return

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        batch = list(self._buffer.values())
        try:
            self._write(batch)
        except BaseException as exc:
            self._error = exc
            self._buffer.clear()
            self._oldest = None
            raise
        self._buffer.clear()
        self._oldest = None

    def _write(self, batch: list[tuple]) -> None:
        """One transaction per flush; lost connections and lock conflicts retried, bad rows named."""
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.transaction():
                    with self._conn.cursor() as cur:
                        cur.executemany(self._statement, batch)
                self.rows_written += len(batch)
                return
            except psycopg.Error as exc:
                if _is_bad_row(exc):
                    raise self._find_bad_row(batch, exc) from None
                if not _is_transient(exc) or attempt >= self.max_retries:
                    raise ReadingsSinkError(
                        f"readings sink: flush of {len(batch)} rows into {self.table} failed"
                        f"{' after %d attempts' % (attempt + 1) if attempt else ''}: "
                        f"{type(exc).__name__} ({getattr(exc, 'sqlstate', None)}): {exc}",
                        getattr(exc, "sqlstate", None)) from None
                log.warning("readings sink: %s, retrying in %.2fs", type(exc).__name__, delay)
                if getattr(exc, "sqlstate", None) not in _CONFLICT_CODES and self._conn is not None:
                    try:
                        self._conn.close()
                    except Exception:
                        pass
                    self._conn = None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)

    def _find_bad_row(self, batch: list[tuple], exc: psycopg.Error) -> ReadingsSinkError:
        """Replay the flush row by row in arrival order; commit the rows before the first refused one."""
        conn = self._conn
        found: tuple | None = None  # (id, column, reason, sqlstate) of the first refused row
        written = 0
        try:
            with conn.transaction():
                with conn.cursor() as cur:
                    for values in batch:
                        try:
                            with conn.transaction():  # a savepoint per row
                                cur.execute(self._statement, values)
                        except psycopg.Error as one:
                            diag = getattr(one, "diag", None)
                            column = getattr(diag, "column_name", None) if diag else None
                            constraint = getattr(diag, "constraint_name", None) if diag else None
                            reason = str(one).strip().splitlines()[0] if str(one).strip() else type(one).__name__
                            if constraint:
                                reason += f" (constraint {constraint})"
                            found = (values[0], column, f"Postgres refused it: {reason}",
                                     getattr(one, "sqlstate", None))
                            break
                        written += 1
            # the savepoints of the good rows before the bad one are committed here
        except psycopg.Error as again:
            return ReadingsSinkError(f"readings sink: flush into {self.table} refused ({exc.sqlstate}: {exc}); "
                                     f"finding the row failed too: {again}", getattr(exc, "sqlstate", None))
        self.rows_written += written
        if found is None:
            return ReadingsSinkError(f"readings sink: flush of {len(batch)} rows refused as a whole "
                                     f"({getattr(exc, 'sqlstate', None)}: {exc}) but every row went in alone; "
                                     "they are committed", getattr(exc, "sqlstate", None))
        error = bad_row(*found, written_before=written)
        log.error("readings sink: %s", error)
        return error

    def _connect(self) -> psycopg.Connection:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10,
                                       application_name="readings-foreach-sink")
            except psycopg.OperationalError as exc:
                if attempt >= self.max_retries:
                    raise ReadingsSinkError(f"readings sink: cannot connect after {attempt + 1} attempts: "
                                            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
        raise AssertionError("unreachable")


__all__ = ["ReadingsWriter", "BadReadingError", "ReadingsSinkError", "check_row"]
