"""Foreach writer for ``readings`` that fails loudly and names the bad row.

Table: readings(id text primary key, sensor text not null,
                score double precision check (score <> 'NaN'), note text)

Behaviour
---------
* Each row is upserted (``INSERT ... ON CONFLICT (id) DO UPDATE``) and committed
  on its own (autocommit) as soon as ``process`` sees it. That is what real-time
  mode needs (no buffering until the end of a long epoch) and it guarantees that
  every row processed before a bad one is already durable when the task fails.
* Nothing is ever cleaned: no NUL stripping, no NaN -> NULL, no id truncation,
  no skipping. A value Postgres cannot store as-is makes the task fail with
  ``BadReadingError`` whose message starts with the offending row's id, e.g.::

      BadReadingError: readings row id='s-17' rejected: column 'note' contains a
      NUL (0x00) character, which Postgres text cannot store ...

  The original database error (if any) is chained as ``__cause__`` and its
  SQLSTATE is put in the message. Spark shows the Python traceback (with this
  message) in the task failure and in the StreamingQueryException on the
  driver, so on-call sees WHICH row broke it.
* The cheap, unambiguous problems are detected in Python before the round trip
  (NUL in any text column, NaN score, NULL id / sensor); everything else
  (absurdly long id -> btree "index row size exceeds maximum", any constraint
  we did not anticipate) is rejected by Postgres itself and re-raised with the
  row id attached. Postgres stays the source of truth for what is valid - the
  writer never invents a length limit of its own.
* The id in the message is shown with ``repr`` (so NULs / control characters
  are visible rather than corrupting the log line) together with its length.
  It is shown in full; only if it is longer than ``max_id_in_message``
  characters (default 100 000) is it elided in the middle, and then the
  length and a SHA-256 of the full id are added so it can still be found.

Because foreach is at-least-once and the write is an upsert, a retried task
or a restarted query rewrites the already-committed rows harmlessly and stops
again at the same bad row until upstream is fixed (or the row is dealt with
deliberately, e.g. by a dead-letter path the team decides on).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Optional

import psycopg
from psycopg import sql


class BadReadingError(Exception):
    """A row could not be written unchanged. ``row_id`` holds the offending id."""

    def __init__(self, message: str, row_id: Any = None, column: Optional[str] = None):
        super().__init__(message)
        self.row_id = row_id
        self.column = column

    # keep the id/column when the exception is pickled between processes
    def __reduce__(self):
        return (self.__class__, (self.args[0], self.row_id, self.column))


def _describe_id(row_id: Any, limit: int) -> str:
    if row_id is None:
        return "id=NULL"
    text = row_id if isinstance(row_id, str) else str(row_id)
    if len(text) <= limit:
        return f"id={text!r} (len {len(text)})"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    half = limit // 2
    return (f"id={text[:half]!r}...{text[-half:]!r} (len {len(text)}, "
            f"sha256 {digest})")


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        return getattr(row, name, None)


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*[p.strip('"') for p in table.split(".")])


class ReadingsWriter:
    """``df.writeStream.foreach(ReadingsWriter(dsn, "readings"))``"""

    COLUMNS = ("id", "sensor", "score", "note")
    TEXT_COLUMNS = ("id", "sensor", "note")

    def __init__(self, dsn: str, table: str = "readings", max_id_in_message: int = 100_000):
        self.dsn = dsn
        self.table = table
        self.max_id_in_message = max_id_in_message
        self._conn = None
        self._sql = None
        self._partition_id = None
        self._epoch_id = None

    def __getstate__(self):
        d = self.__dict__.copy()
        d["_conn"] = None
        d["_sql"] = None
        return d

    # ------------------------------------------------------------------ sql
    def _upsert_sql(self) -> sql.Composed:
        cols = self.COLUMNS
        return sql.SQL(
            "INSERT INTO {t} ({c}) VALUES ({v}) "
            "ON CONFLICT (id) DO UPDATE SET {u}"
        ).format(
            t=_table_ident(self.table),
            c=sql.SQL(", ").join(map(sql.Identifier, cols)),
            v=sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            u=sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                for c in cols if c != "id"),
        )

    # ------------------------------------------------------------ lifecycle
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._partition_id, self._epoch_id = partition_id, epoch_id
        self._conn = psycopg.connect(self.dsn, autocommit=True)
        self._sql = self._upsert_sql().as_string(self._conn)
        return True

    def _fail(self, row_id: Any, column: Optional[str], reason: str,
              cause: Optional[BaseException] = None) -> BadReadingError:
        msg = (f"{self.table} row {_describe_id(row_id, self.max_id_in_message)} rejected"
               f"{'' if column is None else f' (column {column!r})'}: {reason} "
               f"[partition {self._partition_id}, epoch {self._epoch_id}; "
               f"row was NOT written, rows before it are committed]")
        err = BadReadingError(msg, row_id=row_id, column=column)
        err.__cause__ = cause
        return err

    def _validate(self, row_id: Any, values: dict) -> None:
        if row_id is None:
            raise self._fail(None, "id", "id is NULL (primary key)")
        for col in self.TEXT_COLUMNS:
            v = values[col]
            if v is not None and not isinstance(v, str):
                raise self._fail(row_id, col, f"expected text, got {type(v).__name__}")
            if v is not None and "\x00" in v:
                pos = v.index("\x00")
                raise self._fail(
                    row_id, col,
                    f"contains a NUL (0x00) character at offset {pos}, which Postgres "
                    f"text cannot store; refusing to strip it")
        if values["sensor"] is None:
            raise self._fail(row_id, "sensor", "sensor is NULL (column is NOT NULL)")
        score = values["score"]
        if score is not None:
            try:
                f = float(score)
            except (TypeError, ValueError):
                raise self._fail(row_id, "score", f"not a number: {score!r}") from None
            if math.isnan(f):
                raise self._fail(row_id, "score",
                                 "score is NaN (violates check score <> 'NaN'); "
                                 "refusing to write it as NULL or 0")

    def process(self, row: Any) -> None:
        if self._conn is None:
            self.open(-1, -1)
        values = {c: _get(row, c) for c in self.COLUMNS}
        row_id = values["id"]
        self._validate(row_id, values)
        params = [values["id"], values["sensor"],
                  None if values["score"] is None else float(values["score"]),
                  values["note"]]
        try:
            self._conn.execute(self._sql, params)
        except psycopg.Error as e:
            state = getattr(e, "sqlstate", None)
            raise self._fail(
                row_id, getattr(getattr(e, "diag", None), "column_name", None),
                f"Postgres refused it (SQLSTATE {state}): {str(e).strip()}", e) from e
        except Exception as e:  # adaptation errors etc. still name the row
            raise self._fail(row_id, None, f"{type(e).__name__}: {e}", e) from e

    def close(self, error: Optional[BaseException]) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        # ``error`` (if any) is already failing the task; Spark reports it.


__all__ = ["ReadingsWriter", "BadReadingError"]
