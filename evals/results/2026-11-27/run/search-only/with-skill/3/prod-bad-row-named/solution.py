"""Foreach writer for ``readings`` that names the row that broke it.

Usage (PySpark, real-time mode or micro-batch)::

    from solution import ReadingsWriter
    (df.writeStream
       .foreach(ReadingsWriter("host=... dbname=... user=... password=...", "readings"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/readings")
       .trigger(realTime="5 minutes")
       .start())

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``): foreach delivery is
  at-least-once, so a replayed long batch / epoch is harmless.
* A bad row fails the task with :class:`BadRowError` whose message names the row's
  ``id`` (``repr`` and, if different, the raw text), the column and the reason.
  The row is never dropped, truncated or cleaned: nothing is ever altered, the
  task fails and Spark stops the query (after its task retries) with that message.
* Rows that arrived before the bad row are committed before the error is raised,
  so they stay in the table; rows after it in the same task are not written
  (Spark would replay them, and they would stop at the same bad row again).
* Garbage known up front is refused before it reaches Postgres (so psycopg's own
  generic "NUL bytes" error, which names no row, never happens): NUL bytes or lone
  surrogates in any text, a NaN score (the table's CHECK forbids it), a null
  ``id``/``sensor``, and an ``id`` longer than ``max_id_bytes`` (default 2704
  bytes, the B-tree index entry limit: longer keys fail or index only by luck
  of compression). Anything else Postgres refuses (another CHECK, a trigger...)
  is found by replaying the failed flush row by row: the rows before the first
  refused row are committed and the refused row is named.
* Under real-time mode ``open()``/``close()`` run once per long batch, so rows are
  flushed from ``process()`` (batch size) and by a dwell timer thread, not only at
  ``close()``. ``open()`` never returns False (Spark would drop rows silently).

Requires psycopg 3 on the executors.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any

__all__ = ["ReadingsWriter", "ReadingsForeachWriter", "BadRowError", "SinkError"]

COLUMNS = ("id", "sensor", "score", "note")
NOT_NULL = ("id", "sensor")
BTREE_MAX_KEY_BYTES = 2704


class SinkError(RuntimeError):
    """The sink could not write (connection, setup, or a flush that failed for good)."""


class BadRowError(SinkError):
    """One row cannot be written; the message names its id, column and reason."""

    def __init__(self, row_id: Any, column: str | None, reason: str):
        self.row_id = row_id
        self.column = column
        shown = repr(row_id)
        if isinstance(row_id, str) and repr(row_id)[1:-1] != row_id:
            shown += f" (raw: {row_id})"
        where = f" at column {column}" if column else ""
        super().__init__(f"bad row: row with id={shown} rejected{where}: {reason}. "
                         "The row was not written, dropped or altered; rows before it were committed.")


def _text_problem(value: str) -> str | None:
    if "\x00" in value:
        return "text contains a NUL byte (\\x00), which Postgres text cannot store"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "text contains a lone surrogate, which is not valid UTF-8"
    return None


def _is_transient(exc: BaseException, conn) -> bool:
    import psycopg

    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("08") or state in ("40001", "40P01", "57P01", "57P02", "57P03"):
        return True
    if isinstance(exc, psycopg.OperationalError) and not state:
        return True  # connection lost / server gone: libpq gives no SQLSTATE
    return conn is None or conn.closed or getattr(conn, "broken", False)


def _is_row_error(exc: BaseException) -> bool:
    """A refusal caused by the values of some row (data, constraint, size limit)."""
    import psycopg

    state = getattr(exc, "sqlstate", None) or ""
    return (isinstance(exc, (psycopg.DataError, psycopg.IntegrityError))
            or state[:2] in ("22", "23", "54"))


class ReadingsForeachWriter:
    """Picklable PySpark ``foreach`` writer: upsert on id, bad rows named, never dropped."""

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 500, max_dwell_ms: int = 100,
                 max_id_bytes: int = BTREE_MAX_KEY_BYTES, max_retries: int = 5, backoff_ms: int = 250):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty connection string")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty table name")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms = max_batch_rows, max_dwell_ms
        self.max_id_bytes, self.max_retries, self.backoff_ms = max_id_bytes, max_retries, backoff_ms
        self._reset()

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_id_bytes", "max_retries", "backoff_ms")

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"ReadingsForeachWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn = None
        self._statement = None
        self._buffer: list[tuple] = []
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False

    # -- setup ------------------------------------------------------------------------
    def _connect(self):
        import psycopg

        return psycopg.connect(self.dsn, autocommit=False, application_name="readings-foreach-sink")

    def _target(self):
        from psycopg import sql

        if "." in self.table and not self.table.startswith('"'):
            schema, _, name = self.table.partition(".")
            return sql.Identifier(schema, name)
        return sql.Identifier(self.table.strip('"'))

    def _build_statement(self):
        from psycopg import sql

        cols = sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS)
        return sql.SQL("INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({key}) DO UPDATE SET {upd}").format(
            t=self._target(), cols=cols,
            vals=sql.SQL(", ").join(sql.Placeholder() for _ in COLUMNS),
            key=sql.Identifier("id"),
            upd=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
                                   for c in COLUMNS if c != "id"))

    # -- rows ---------------------------------------------------------------------------
    def _values(self, row: Any) -> tuple:
        if hasattr(row, "asDict"):
            data = row.asDict(recursive=False)
        elif isinstance(row, dict):
            data = row
        else:
            data = dict(zip(COLUMNS, row))
        row_id = data.get("id")
        missing = [c for c in COLUMNS if c not in data]
        if missing:
            raise BadRowError(row_id, missing[0], f"the row has no field {missing[0]!r} (fields: {sorted(data)})")
        values = tuple(data[c] for c in COLUMNS)
        self._check(values)
        return values

    def _check(self, values: tuple) -> None:
        """Refuse what Postgres would refuse (or psycopg would refuse without naming the row)."""
        row_id = values[0]
        for column, value in zip(COLUMNS, values):
            if value is None:
                if column in NOT_NULL:
                    raise BadRowError(row_id, column, f"{column} is null (NOT NULL column"
                                      f"{', the primary key' if column == 'id' else ''})")
                continue
            if column == "score":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise BadRowError(row_id, column, f"score must be a number, got {type(value).__name__}")
                if isinstance(value, float) and math.isnan(value):
                    raise BadRowError(row_id, column, "score is NaN (the table's CHECK (score <> 'NaN') refuses it)")
                continue
            if not isinstance(value, str):
                raise BadRowError(row_id, column, f"{column} must be text, got {type(value).__name__}")
            problem = _text_problem(value)
            if problem:
                raise BadRowError(row_id, column, problem)
        id_bytes = len(values[0].encode("utf-8"))
        if id_bytes > self.max_id_bytes:
            raise BadRowError(row_id, "id", f"id is {id_bytes} bytes long, more than the {self.max_id_bytes} "
                              "bytes a primary-key (B-tree) entry can hold; it is not truncated")

    # -- writing -------------------------------------------------------------------------
    def _execute(self, rows: list[tuple]) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(self._statement, rows)

    def _find_bad_row(self, rows: list[tuple], exc: BaseException) -> BadRowError:
        """Replay ``rows`` one by one; commit those before the first refused one; name it."""
        self._conn.rollback()
        for i, values in enumerate(rows):
            try:
                self._execute([values])
            except Exception as row_exc:
                if not _is_row_error(row_exc):
                    raise
                self._conn.rollback()
                if i:
                    self._execute(rows[:i])
                self._conn.commit()
                state = getattr(row_exc, "sqlstate", None)
                column = getattr(getattr(row_exc, "diag", None), "column_name", None)
                constraint = getattr(getattr(row_exc, "diag", None), "constraint_name", None)
                reason = f"{type(row_exc).__name__}: {str(row_exc).strip()}"
                if constraint:
                    reason += f" (constraint {constraint})"
                if state:
                    reason += f" [SQLSTATE {state}]"
                return BadRowError(values[0], column, reason)
        self._conn.rollback()
        return BadRowError(rows[0][0] if rows else None, None,
                           f"the flush failed but no single row fails alone: {type(exc).__name__}: {exc}")

    def _flush_locked(self) -> None:
        """Write the buffer (one transaction); on a bad row commit the rows before it and raise."""
        if not self._buffer:
            return
        rows = list(self._buffer)
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                try:
                    self._execute(rows)
                    self._conn.commit()
                except Exception as exc:
                    if _is_row_error(exc):
                        bad = self._find_bad_row(rows, exc)
                        self._buffer.clear()
                        self._oldest = None
                        raise bad from None
                    raise
                break
            except BadRowError:
                raise
            except Exception as exc:
                conn_ok = self._conn is not None and not self._conn.closed
                if not _is_transient(exc, self._conn):
                    if conn_ok:
                        try:
                            self._conn.rollback()
                        except Exception:
                            self._drop_connection()
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed: "
                                    f"{type(exc).__name__}: {exc}") from None
                self._drop_connection()
                attempt += 1
                if attempt > self.max_retries:
                    raise SinkError(f"flush of {len(rows)} rows into {self.table} failed after {attempt} "
                                    f"attempts: {type(exc).__name__}: {exc}") from None
                time.sleep(min(5.0, self.backoff_ms / 1000.0 * 2 ** (attempt - 1)))
        self._buffer.clear()
        self._oldest = None

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _timer_loop(self) -> None:
        interval = max(self.max_dwell_ms, 10) / 2000.0
        while not self._stop.wait(interval):
            with self._lock:
                if self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or close()
                        self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- foreach contract -------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset()
        self._statement = self._build_statement()
        self._conn = self._connect()
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, name="readings-sink-timer", daemon=True)
            self._timer.start()
        return True  # never False: Spark would skip this partition's rows without an error

    def process(self, row: Any) -> None:
        if not self._open:
            raise SinkError("process() called on a writer that is not open")
        with self._lock:
            self._raise_stored()
            try:
                values = self._values(row)
            except BadRowError:
                self._flush_locked()  # the rows before the bad one stay written
                raise
            self._buffer.append(values)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=30)
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                else:
                    self._buffer.clear()  # the task failed: Spark replays the epoch (upserts are idempotent)
        finally:
            self._drop_connection()


def ReadingsWriter(dsn: str, table: str) -> ReadingsForeachWriter:
    """The foreach writer for ``df.writeStream.foreach(...)``."""
    return ReadingsForeachWriter(dsn, table)
