"""Lossless foreach writer: Spark -> Postgres ``ledger`` with an upsert on ``id``.

Why the old sink lost digits/microseconds (typical causes, all avoided here):
  * Decimal values went through ``float`` (or ``str(float)``) before reaching
    Postgres -> only ~15-17 significant digits survive out of 38.
  * Timestamps were formatted with ``strftime``/``str()`` at second or
    millisecond precision, went through ``float(epoch)``, or were sent as
    tz-aware values into a ``timestamp without time zone`` column, so Postgres
    shifted/rounded them.
  * Values were spliced into the SQL text instead of being sent as parameters.

What this writer does instead:
  * every value is sent as a bound parameter with psycopg 3 (server-side
    parameters, never string-formatted into SQL);
  * ``decimal.Decimal`` is passed through untouched -> psycopg sends the exact
    numeric text; never converted to float;
  * ``datetime`` is passed as a *naive* ``timestamp`` (microseconds kept).
    PySpark hands TimestampType to Python as a naive wall-clock datetime in the
    worker's local time zone (``datetime.fromtimestamp``), i.e. the same value
    ``df.collect()`` shows; we store exactly that wall-clock value. If a
    tz-aware datetime ever shows up, it is converted to the same convention
    (process-local wall time) instead of letting Postgres convert it with the
    *session* TimeZone. Run executors with TZ=UTC and
    spark.sql.session.timeZone=UTC in production so "wall time" == UTC and
    there is no DST fold ambiguity;
  * ``date`` passes through; ``bytes``/``bytearray`` go to bytea untouched;
  * ``float`` goes as float8 (psycopg uses the shortest round-trip repr, NaN and
    +/-Infinity included);
  * every placeholder carries an explicit cast to the column type
    (``::numeric``, ``::uuid``, ``::jsonb``, ``::text[]`` ...), so strings
    holding a UUID / JSON text are parsed by Postgres itself and empty or
    all-null arrays are typed correctly; ``None`` becomes SQL NULL for every
    column (and for NULL elements inside ``tags``).
  * ``INSERT ... ON CONFLICT (id) DO UPDATE SET <every column> = EXCLUDED.<col>``
    so a replayed epoch (foreach is at-least-once) converges to the same row.

Read-back caveats (properties of the Postgres column types, not of the writer):
  * ``uuid`` is returned in canonical lower-case hyphenated form;
  * ``jsonb`` normalises whitespace / key order / duplicate keys, but keeps
    numbers exactly (stored as numeric). Read it back with ``doc::text`` (or
    compare ``json.loads(..., parse_float=Decimal)``), because psycopg's default
    jsonb loader uses ``json.loads`` and would turn long numbers into floats.
  * Postgres ``text``/``jsonb`` cannot store the NUL character (U+0000); such a
    value is rejected with a clear error rather than silently altered.

Rows are written one statement per row in autocommit mode: this suits
real-time mode (no buffering until the epoch's ``close``) and keeps each row
independent. psycopg 3 automatically prepares the statement after a few
executions, so the per-row cost is one round trip.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg import sql

# column name -> Postgres type (order = order of the table definition)
LEDGER_COLUMNS: List[Tuple[str, str]] = [
    ("id", "text"),
    ("amount", "numeric"),          # numeric(38,18): cast to plain numeric, column typmod applies
    ("at", "timestamp"),            # timestamp(6) without time zone
    ("day", "date"),
    ("ref", "uuid"),
    ("doc", "jsonb"),
    ("blob", "bytea"),
    ("tags", "text[]"),
    ("note", "text"),
    ("flag", "boolean"),
    ("n", "bigint"),
    ("ratio", "double precision"),
]

_TYPE_SQL = {
    "text": sql.SQL("text"),
    "numeric": sql.SQL("numeric"),
    "timestamp": sql.SQL("timestamp"),
    "date": sql.SQL("date"),
    "uuid": sql.SQL("uuid"),
    "jsonb": sql.SQL("jsonb"),
    "bytea": sql.SQL("bytea"),
    "text[]": sql.SQL("text[]"),
    "boolean": sql.SQL("boolean"),
    "bigint": sql.SQL("bigint"),
    "double precision": sql.SQL("double precision"),
}


def _split_table(table: str) -> sql.Composable:
    """'schema.table' -> "schema"."table"; 'table' -> "table"."""
    parts = [p.strip('"') for p in table.split(".")]
    return sql.Identifier(*parts)


def build_upsert(table: str, columns: Sequence[Tuple[str, str]] = LEDGER_COLUMNS,
                 key: str = "id") -> sql.Composed:
    names = [c for c, _ in columns]
    placeholders = [
        sql.SQL("{}::{}").format(sql.Placeholder(), _TYPE_SQL[t]) for _, t in columns
    ]
    updates = [
        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
        for c in names if c != key
    ]
    return sql.SQL(
        "INSERT INTO {tbl} ({cols}) VALUES ({vals}) "
        "ON CONFLICT ({key}) DO UPDATE SET {upd}"
    ).format(
        tbl=_split_table(table),
        cols=sql.SQL(", ").join(sql.Identifier(c) for c in names),
        vals=sql.SQL(", ").join(placeholders),
        key=sql.Identifier(key),
        upd=sql.SQL(", ").join(updates),
    )


# --------------------------------------------------------------------------
# value conversion: lossless, None-preserving
# --------------------------------------------------------------------------

def _no_nul(col: str, s: str) -> str:
    if "\x00" in s:
        raise ValueError(
            f"column {col!r}: value contains NUL (U+0000), which Postgres "
            f"text/jsonb cannot store; refusing to alter it silently")
    return s


def _to_naive_timestamp(v: Any) -> Any:
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            # same convention PySpark uses for TimestampType: process-local wall time
            v = v.astimezone().replace(tzinfo=None)
        return v
    return v


def _convert(col: str, pgtype: str, v: Any) -> Any:
    if v is None:
        return None
    if pgtype == "numeric":
        if isinstance(v, decimal.Decimal):
            return v
        if isinstance(v, int):
            return decimal.Decimal(v)
        if isinstance(v, str):
            return decimal.Decimal(v)
        # a float here would already have lost digits upstream; keep its exact
        # binary value rather than a rounded repr, but do not hide it
        return decimal.Decimal(v)
    if pgtype == "timestamp":
        return _to_naive_timestamp(v)
    if pgtype == "date":
        if isinstance(v, _dt.datetime):  # defensive; DateType gives date
            return v.date()
        return v
    if pgtype == "bytea":
        if isinstance(v, (bytes, bytearray, memoryview)):
            return bytes(v)
        raise TypeError(f"column {col!r}: expected bytes, got {type(v).__name__}")
    if pgtype == "text[]":
        out = []
        for e in v:
            out.append(None if e is None else _no_nul(col, str(e)))
        return out
    if pgtype == "jsonb":
        if isinstance(v, str):
            return _no_nul(col, v)      # JSON text, parsed by Postgres (numbers stay exact)
        return json.dumps(v)            # defensive: a dict/list was given
    if pgtype in ("text", "uuid"):
        return _no_nul(col, str(v))
    if pgtype == "boolean":
        return bool(v)
    if pgtype == "bigint":
        return int(v)
    if pgtype == "double precision":
        return float(v)
    return v


def _row_get(row: Any, col: str) -> Any:
    if isinstance(row, dict):
        return row.get(col)
    try:
        return row[col]              # pyspark.sql.Row supports name lookup
    except (KeyError, ValueError, IndexError, TypeError):
        return getattr(row, col, None)


class LedgerWriter:
    """Foreach writer for ``df.writeStream.foreach(LedgerWriter(dsn, "ledger"))``.

    Picklable (only dsn/table are stored before ``open``); one connection per
    partition/epoch task, opened in ``open`` and closed in ``close``.
    """

    def __init__(self, dsn: str, table: str = "ledger",
                 columns: Sequence[Tuple[str, str]] = LEDGER_COLUMNS):
        self.dsn = dsn
        self.table = table
        self.columns = list(columns)
        self._conn: Optional[psycopg.Connection] = None
        self._sql = None

    # pickling: never ship a live connection
    def __getstate__(self) -> Dict[str, Any]:
        d = self.__dict__.copy()
        d["_conn"] = None
        d["_sql"] = None
        return d

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._conn = psycopg.connect(self.dsn, autocommit=True)
        # Make the session explicit; neither value changes what is stored for
        # naive timestamps, but they remove any dependence on server defaults.
        self._conn.execute("SET TIME ZONE 'UTC'")
        self._conn.execute("SET extra_float_digits = 3")
        self._sql = build_upsert(self.table, self.columns).as_string(self._conn)
        return True

    def params_for(self, row: Any) -> List[Any]:
        return [_convert(c, t, _row_get(row, c)) for c, t in self.columns]

    def process(self, row: Any) -> None:
        if self._conn is None:          # defensive: open() not called
            self.open(0, 0)
        # one statement per row, committed immediately (autocommit)
        self._conn.execute(self._sql, self.params_for(row), prepare=True)

    def close(self, error: Optional[BaseException]) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        # If ``error`` is set Spark already fails the task and retries it; the
        # upsert makes the replay idempotent, so nothing else to do here.


__all__ = ["LedgerWriter", "build_upsert", "LEDGER_COLUMNS"]
