"""Which row (and column) made a flush fail: replay it row by row, write nothing.

A failed flush is replayed one row at a time inside a transaction that is
always rolled back; the first row that fails alone is the bad one, and its
column comes from the server's error fields or from inserting its values one
by one into a constraint-free temporary copy of the table. A statement
timeout is searched the same way within the failed flush's own time (each
row runs with ``statement_timeout`` set to what is left of it), so the search
never takes longer than the flush took.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from rtm_lakebase.sink.errors import BadRowError, Failure, SinkError, classify
from rtm_lakebase.sink.rows import _describe_key
from rtm_lakebase.sink.statements import ColumnInfo

log = logging.getLogger(__name__)


class FlushDiagnosis:
    """Turns a failed flush into a :class:`BadRowError` naming the row, or a :class:`SinkError`."""

    def __init__(self, target: sql.Identifier, target_desc: str, columns: Sequence[str],
                 types: Mapping[str, ColumnInfo], key_of: Callable[[tuple], Mapping[str, Any] | None],
                 write_rows: Callable[[psycopg.Connection, list[tuple]], int],
                 redact: Callable[[object], str],
                 transport: Callable[[str, Any], Any] = lambda _name, value: value):
        self.transport = transport  # a value as its column's parameter array carries it
        self.target, self.target_desc = target, target_desc
        self.columns, self.types = tuple(columns), types
        self.key_of, self.write_rows, self.redact = key_of, write_rows, redact

    def bad_value(self, values: tuple, column: str, reason: str) -> BadRowError:
        """A value refused before sending (see ValueChecks)."""
        return self._bad_row(values, column, reason, None)

    def explain(self, conn: psycopg.Connection, batch: list[tuple], exc: BaseException,
                budget_s: float | None = None) -> SinkError:
        """The first row of ``batch`` that fails alone; ``budget_s`` bounds the search (timeouts)."""
        sqlstate = getattr(exc, "sqlstate", None)
        try:
            found = self._replay(conn, batch, budget_s)
        except Exception as diag_exc:  # the original error is what matters
            log.debug("diagnosis of a failed flush failed", exc_info=True)
            return SinkError(f"flush to {self.target_desc} failed: {self._reason(exc)} (finding the row failed: "
                             f"{self._reason(diag_exc)}); nothing of this flush was written", sqlstate)
        if found is not None:
            return found
        if budget_s is not None:
            return SinkError(f"flush to {self.target_desc} of {len(batch)} rows ran past its time limit "
                             f"({self._reason(exc)}) and no single row does alone; not retried: lower "
                             "max_batch_rows or raise statement_timeout; nothing of this flush was written", sqlstate)
        return SinkError(f"flush to {self.target_desc} failed but no single row fails alone (keys distinct "
                         f"in Python but equal in Postgres?): {self._reason(exc)}"
                         f"{f' [SQLSTATE {sqlstate}]' if sqlstate else ''}; nothing of this flush was written", sqlstate)

    def _replay(self, conn: psycopg.Connection, batch: list[tuple], budget_s: float | None) -> BadRowError | None:
        deadline = time.monotonic() + budget_s if budget_s is not None else None
        with conn.transaction(force_rollback=True):
            for values in batch:
                if deadline is not None:
                    left_ms = int((deadline - time.monotonic()) * 1000)
                    if left_ms <= 0:
                        return None
                    conn.execute("SELECT set_config('statement_timeout', %s, true)", [str(left_ms)])
                started = time.monotonic()
                try:
                    with conn.transaction():
                        self.write_rows(conn, [values])
                except Exception as row_exc:  # classified below
                    kind = classify(row_exc)
                    if kind is Failure.ROW:
                        column = getattr(getattr(row_exc, "diag", None), "column_name", None)
                        column = column or self._find_column(conn, values)
                        return self._bad_row(values, column, None, row_exc)
                    if kind is Failure.TIMEOUT and budget_s is not None \
                            and time.monotonic() - started >= budget_s / 2:
                        return self._bad_row(values, None, "this row alone did not finish within the flush's "
                                             f"time ({budget_s:.2f} s, statement_timeout or a lock held by "
                                             "another session); not retried", row_exc)
                    if kind is Failure.TIMEOUT:
                        return None
                    raise
        return None

    def _find_column(self, conn: psycopg.Connection, values: tuple) -> str | None:
        """Insert each value alone into a constraint-free copy of the table; the one that fails is it."""
        probe = sql.Identifier("pg_temp", "sink_probe")
        with conn.transaction():
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(probe))
            conn.execute(sql.SQL("CREATE TEMP TABLE sink_probe AS SELECT * FROM {} WITH NO DATA")
                         .format(self.target))
            for name, value in zip(self.columns, values, strict=True):
                if value is None:
                    continue
                info = self.types[name]
                pick = sql.SQL("u.c0::{}").format(sql.SQL(info.cast_type)) if info.is_array else sql.SQL("u.c0")
                statement = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM unnest({}::{}[]) AS u(c0)").format(
                    probe, sql.Identifier(name), pick, sql.Placeholder(), sql.SQL(info.transport_type))
                try:
                    with conn.transaction():
                        conn.execute(statement, [[self.transport(name, value)]])
                except Exception as exc:  # classified below
                    if classify(exc) is Failure.ROW:
                        return name
                    raise
        return None

    def _bad_row(self, values: tuple, column: str | None, detail: str | None,
                 exc: BaseException | None) -> BadRowError:
        key = self.key_of(values)
        if not key:
            text = repr(dict(zip(self.columns, values, strict=False)))
            key = {"row": text if len(text) <= 300 else text[:297] + "..."}
        col_type = ""
        if column and column in self.types:
            col_type = f" ({self.types[column].full_type})"
        reason = detail or self._reason(exc)
        sqlstate = getattr(exc, "sqlstate", None)
        where = f" at column {column}{col_type}" if column else ""
        return BadRowError(
            f"row with key {_describe_key(key)} rejected{where}: {reason}"
            f"{f' [SQLSTATE {sqlstate}]' if sqlstate else ''}; nothing of this flush was written "
            f"to {self.target_desc}",
            key=key, column=column, sqlstate=sqlstate)

    def _reason(self, exc: BaseException | None) -> str:
        if exc is None:
            return "rejected"
        text = self.redact(exc).splitlines()
        first = text[0] if text else ""
        return first if isinstance(exc, psycopg.Error) else f"{type(exc).__name__}: {first}"
