"""Foreach writer for ``readings`` that fails loudly and names the bad row.

Table::

    readings(id text primary key,
             sensor text not null,
             score double precision check (score <> 'NaN'),
             note text)

Usage::

    (df.writeStream
       .foreach(ReadingsWriter(dsn, "readings"))
       .option("checkpointLocation", ...)
       .trigger(realTime="5 minutes")
       .start())

Contract
--------
* Every row is upserted on ``id`` (``INSERT ... ON CONFLICT (id) DO UPDATE``),
  so a retried task / replayed batch converges to the same table.
* A row that cannot be stored *as it is* (NUL byte in any text column, NaN
  score, NULL id/sensor, id too long for the primary-key index, any other
  Postgres error) is **never** dropped, truncated or cleaned.  The writer
  raises :class:`BadReadingError`, whose message starts with the offending
  row's id (``repr`` of the full id, so a NUL or a 100 kB id is still
  identifiable), the column and the reason; the original error is chained as
  ``__cause__``.  Spark fails the task with that message, so the on-call sees
  which row broke it in the driver log / query exception.
* Rows processed before the bad row stay in Postgres: buffered rows are
  committed *before* the exception is raised.  If a buffered batch fails on
  the server, it is rolled back and replayed one row per transaction, so every
  row up to the culprit is committed and the culprit is identified exactly.
* By default every row is committed as it arrives (``flush_rows=1``): in
  real-time mode ``close()`` only happens at the end of a long batch, so
  buffering until then would add latency.  ``flush_rows`` > 1 batches rows per
  round trip; the guarantees above still hold.
"""

from __future__ import annotations

import math

import psycopg
from psycopg import sql

COLUMNS = ("id", "sensor", "score", "note")
TEXT_COLUMNS = ("id", "sensor", "note")


class BadReadingError(ValueError):
    """A reading that Postgres cannot store unchanged.  ``row_id`` is the id."""

    def __init__(self, row_id, column, reason):
        self.row_id = row_id
        self.column = column
        self.reason = reason
        super().__init__(
            f"readings: bad row id={row_id!r} "
            f"(id length {len(row_id) if isinstance(row_id, str) else 'n/a'}): "
            f"column {column!r}: {reason}. The row was NOT written, dropped or "
            f"altered; rows before it are committed. Fix the source and restart."
        )


def _get(row, name):
    try:
        return row[name]
    except (KeyError, IndexError, TypeError, ValueError):
        return getattr(row, name, None)


def _table_identifier(table: str) -> sql.Composable:
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return sql.Identifier(*parts)


def build_upsert(table: str) -> sql.Composed:
    return sql.SQL(
        "INSERT INTO {t} (id, sensor, score, note) "
        "VALUES (%s::text, %s::text, %s::float8, %s::text) "
        "ON CONFLICT (id) DO UPDATE SET "
        "sensor = EXCLUDED.sensor, score = EXCLUDED.score, note = EXCLUDED.note"
    ).format(t=_table_identifier(table))


def validate(params: tuple) -> None:
    """Client-side checks for what Postgres would reject anyway.

    Gives a precise reason; the server-side path below still wraps anything
    these checks do not foresee (e.g. id too long for the btree index).
    """
    row_id, sensor, score, _note = params
    if row_id is None:
        raise BadReadingError(row_id, "id", "id is NULL (primary key)")
    for col, val in zip(COLUMNS, params):
        if col in TEXT_COLUMNS and isinstance(val, str) and "\x00" in val:
            raise BadReadingError(
                row_id, col,
                f"contains a NUL byte at position {val.index(chr(0))}; "
                "Postgres text cannot store NUL",
            )
    if sensor is None:
        raise BadReadingError(row_id, "sensor", "sensor is NULL (column is NOT NULL)")
    if isinstance(score, float) and math.isnan(score):
        raise BadReadingError(row_id, "score", "score is NaN (check score <> 'NaN')")


class ReadingsWriter:
    """Foreach writer (open/process/close).  Picklable: connects in ``open``."""

    def __init__(self, dsn: str, table: str = "readings", flush_rows: int = 1,
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.flush_rows = max(1, int(flush_rows))
        self.connect_timeout = connect_timeout
        self._conn = None
        self._buf: list[tuple] = []
        self._query = None

    # -- foreach protocol ----------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        self._buf = []
        self._query = build_upsert(self.table)
        self._conn = psycopg.connect(
            self.dsn, autocommit=False, connect_timeout=self.connect_timeout,
            application_name="readings-foreach-writer",
        )
        return True

    def process(self, row) -> None:
        params = tuple(_get(row, c) for c in COLUMNS)
        try:
            validate(params)
        except BadReadingError:
            # Keep everything that came before the bad row, then fail.
            self._flush()
            raise
        self._buf.append(params)
        if len(self._buf) >= self.flush_rows:
            self._flush()

    def close(self, error) -> None:
        conn = self._conn
        if conn is None:
            return
        try:
            # Even if the task failed for another reason (upstream error),
            # rows already processed are valid and are kept (idempotent
            # upserts, a retry rewrites them identically).  If the failure is
            # ours, the buffer is already empty.
            if self._buf and not conn.closed and not conn.broken:
                try:
                    self._flush()
                except Exception:
                    if error is None:
                        raise
                    # don't mask the original error
        finally:
            self._buf = []
            self._conn = None
            conn.close()

    # -- internals -----------------------------------------------------------
    def _flush(self) -> None:
        if not self._buf:
            return
        conn, rows = self._conn, self._buf
        try:
            with conn.cursor() as cur:
                cur.executemany(self._query, rows)
            conn.commit()
            self._buf = []
            return
        except psycopg.Error:
            if conn.broken:
                raise  # connection problem, not a data problem: plain retry
            conn.rollback()
        # Batch failed: replay one row per transaction so all rows before the
        # culprit are committed and the culprit is named precisely.
        for i, params in enumerate(rows):
            try:
                with conn.cursor() as cur:
                    cur.execute(self._query, params)
                conn.commit()
            except psycopg.Error as exc:
                if conn.broken:
                    # lost connection / server crash: not this row's fault
                    self._buf = []
                    raise
                conn.rollback()
                self._buf = []  # later rows are re-delivered when the task is retried
                diag = getattr(exc, "diag", None)
                column = (getattr(diag, "column_name", None)
                          or getattr(diag, "constraint_name", None) or "?")
                raise BadReadingError(
                    params[0], column,
                    f"Postgres rejected it: {type(exc).__name__}: "
                    f"{str(exc).strip()}",
                ) from exc
        self._buf = []


__all__ = ["ReadingsWriter", "BadReadingError", "build_upsert", "validate"]
