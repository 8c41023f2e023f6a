"""Foreach writer for ``readings`` that fails loudly and names the bad row.

    (df.writeStream
       .foreach(ReadingsWriter(dsn, "readings"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")
       .start())

Contract
--------
* Upsert on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``), so replaying
  an epoch after a failure is idempotent.
* A row that cannot be stored *exactly as received* is never dropped,
  truncated or "cleaned": the task fails with :class:`BadRowError`, whose
  message starts with ``bad row id=<repr(id)>`` and says which column and why
  (NUL byte in text, NaN score, NULL sensor/id, id too long for the primary
  key index, or any other Postgres error such as a check violation).
  Spark puts that message into the task failure / StreamingQueryException, so
  on-call sees the id directly.  Because the row is not skipped, a restarted
  query hits it again until it is fixed upstream (or the row is deliberately
  handled) -- nothing is lost silently.
* Rows that were processed before the bad row stay written: before raising,
  every good row ahead of it in the buffer is committed (each flush is one
  transaction; when a flush fails it is rolled back and replayed row by row,
  committing each good row, until the offending row is found).

Checks done in Python before touching the database (cheap, precise message):
NULL/empty-string is not altered; ``id`` NULL -> error; ``sensor`` NULL ->
error (NOT NULL column); NUL (U+0000) in ``id``/``sensor``/``note`` -> error
(Postgres text cannot store it; stripping it would be silent cleaning);
``score`` NaN -> error (violates the table's CHECK).  Anything else the
database rejects (e.g. an id whose primary-key index entry exceeds the btree
limit, ``index row size ... exceeds maximum 2704``) is caught and re-raised as
BadRowError naming the id, with the original psycopg error chained
(``raise ... from``) and its SQLSTATE in the message.

Ids longer than ``ID_IN_MESSAGE_MAX`` characters are shown as a prefix plus
their length and SHA-256, so an absurdly long id cannot turn the error into a
multi-megabyte message; the full id is kept in ``BadRowError.row_id``.
"""

from __future__ import annotations

import hashlib
import math
import time
from typing import Any, List, Optional, Tuple

COLUMNS = ("id", "sensor", "score", "note")
# SQLSTATE classes that mean "this row's data is unacceptable":
# 22 data exception, 23 integrity violation, 54 program limit (index row size)
_ROW_SQLSTATE_CLASSES = ("22", "23", "54")
ID_IN_MESSAGE_MAX = 4096


def describe_id(row_id: Any) -> str:
    """Printable, unambiguous rendering of a row id for error messages."""
    if row_id is None:
        return "None"
    s = row_id if isinstance(row_id, str) else str(row_id)
    if len(s) <= ID_IN_MESSAGE_MAX:
        return repr(s)
    digest = hashlib.sha256(s.encode("utf-8", "surrogatepass")).hexdigest()
    return "%r...(len=%d, sha256=%s)" % (s[:200], len(s), digest)


class BadRowError(ValueError):
    """A row that cannot be written unchanged; names the row id."""

    def __init__(self, row_id: Any, column: Optional[str], reason: str):
        self.row_id = row_id
        self.column = column
        self.reason = reason
        col = " column=%s" % column if column else ""
        super().__init__("bad row id=%s%s: %s" % (describe_id(row_id), col, reason))

    def __reduce__(self):  # keep it picklable across the Python worker boundary
        return (BadRowError, (self.row_id, self.column, self.reason))


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


def validate(row: Any) -> Tuple[Any, Any, Any, Any]:
    """Return the parameter tuple, or raise BadRowError. Never modifies values."""
    rid = _get(row, "id")
    sensor = _get(row, "sensor")
    score = _get(row, "score")
    note = _get(row, "note")

    if rid is None:
        raise BadRowError(rid, "id", "id is NULL (primary key)")
    for col, val in (("id", rid), ("sensor", sensor), ("note", note)):
        if val is not None and not isinstance(val, str):
            raise BadRowError(rid, col, "expected text, got %s" % type(val).__name__)
        if isinstance(val, str) and "\x00" in val:
            raise BadRowError(
                rid, col,
                "contains a NUL (0x00) character at offset %d; Postgres text "
                "cannot store it and the row is not altered" % val.index("\x00"))
    if sensor is None:
        raise BadRowError(rid, "sensor", "sensor is NULL (column is NOT NULL)")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise BadRowError(rid, "score", "expected a double, got %s" % type(score).__name__)
        score = float(score)
        if math.isnan(score):
            raise BadRowError(rid, "score", "score is NaN (violates CHECK score <> 'NaN')")
    return (rid, sensor, score, note)


def _build_upsert(table: str):
    from psycopg import sql

    return sql.SQL(
        "INSERT INTO {t} (id, sensor, score, note) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET sensor = EXCLUDED.sensor, "
        "score = EXCLUDED.score, note = EXCLUDED.note"
    ).format(t=sql.Identifier(*table.split(".")))


class ReadingsWriter:
    """Spark foreach writer (open / process / close).

    batch_size=1 (default) commits every row as soon as it arrives -- what a
    real-time-mode query wants.  Larger values buffer rows (flushed when full,
    when the oldest buffered row is older than ``max_delay_s`` at the next
    row, and in ``close``).
    """

    def __init__(self, dsn: str, table: str = "readings", batch_size: int = 1,
                 max_delay_s: float = 0.05, connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.batch_size = max(1, int(batch_size))
        self.max_delay_s = max_delay_s
        self.connect_timeout = connect_timeout
        self._conn = None
        self._sql = None
        self._buf: List[tuple] = []
        self._first_ts: Optional[float] = None

    def __getstate__(self):
        st = self.__dict__.copy()
        st.update(_conn=None, _sql=None, _buf=[], _first_ts=None)
        return st

    # ---- foreach protocol -------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        import psycopg

        self._conn = psycopg.connect(self.dsn, autocommit=False,
                                     connect_timeout=self.connect_timeout)
        self._sql = _build_upsert(self.table)
        self._buf = []
        self._first_ts = None
        return True

    def process(self, row) -> None:
        try:
            params = validate(row)
        except BadRowError:
            # keep everything that arrived before this row, then fail loudly
            self._flush()
            raise
        if not self._buf:
            self._first_ts = time.monotonic()
        self._buf.append(params)
        if (len(self._buf) >= self.batch_size
                or time.monotonic() - self._first_ts >= self.max_delay_s):
            self._flush()

    def close(self, error) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            if error is None:
                self._flush()
            else:
                conn.rollback()
        finally:
            self._conn = None
            self._buf = []
            conn.close()

    # ---- internals -----------------------------------------------------------
    def _flush(self) -> None:
        buf, self._buf, self._first_ts = self._buf, [], None
        if not buf:
            return
        import psycopg

        try:
            with self._conn.cursor() as cur:
                cur.executemany(self._sql, buf)
            self._conn.commit()
            return
        except psycopg.Error as exc:
            try:
                self._conn.rollback()
            except psycopg.Error:
                raise exc
            if isinstance(exc, psycopg.OperationalError) and self._conn.broken:
                raise
            if len(buf) == 1:
                self._write_one(buf[0])  # raises BadRowError naming the row
                return
        # find the culprit: commit good rows one by one, fail on the bad one
        for params in buf:
            self._write_one(params)

    def _write_one(self, params: tuple) -> None:
        import psycopg

        try:
            with self._conn.cursor() as cur:
                cur.execute(self._sql, params)
            self._conn.commit()
        except psycopg.Error as exc:
            try:
                self._conn.rollback()
            except psycopg.Error:
                pass
            sqlstate = getattr(exc, "sqlstate", None) or ""
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if not (isinstance(exc, psycopg.DataError) or sqlstate[:2] in _ROW_SQLSTATE_CLASSES):
                # connection loss, permissions, missing table...: not the row's
                # fault, but still say which row was in flight
                raise RuntimeError(
                    "write to %s failed while writing row id=%s (%s%s): %s"
                    % (self.table, describe_id(params[0]), type(exc).__name__,
                       ", SQLSTATE " + sqlstate if sqlstate else "", msg)) from exc
            raise BadRowError(
                params[0], None,
                "Postgres rejected the row (%s%s): %s"
                % (type(exc).__name__, ", SQLSTATE " + sqlstate if sqlstate else "", msg),
            ) from exc
