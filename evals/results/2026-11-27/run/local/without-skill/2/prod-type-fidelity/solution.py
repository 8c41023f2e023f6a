"""Loss-free foreach writer for the Postgres ``ledger`` table.

Usage::

    (df.writeStream
       .foreach(LedgerWriter(dsn, "ledger"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")          # or processingTime=...
       .start())

Why the old sink lost digits, and what this writer does instead
----------------------------------------------------------------
* amount  numeric(38,18) <- DecimalType(38,18): PySpark hands us a
  ``decimal.Decimal``; it is bound as a Decimal (never ``float``, never a
  formatted string), so all 38 digits reach ``numeric`` unchanged.
* at      timestamp(6)  <- TimestampType: PySpark hands us a ``datetime`` with
  full microseconds. It is bound as a datetime parameter (no ``str()``/
  ``strftime('%f')[:3]``/epoch-float round trip), so microseconds survive.
  A naive datetime is bound as ``timestamp`` (no time-zone shift at all); an
  aware one is first converted to UTC and stored as UTC wall-clock.
* day     date           <- DateType: bound as ``datetime.date``.
* ref     uuid           <- StringType: bound as text and cast ``::uuid`` by
  the server (Postgres stores the 128-bit value; it prints it in canonical
  lower-case form).
* doc     jsonb          <- StringType (JSON text): the *text* is cast
  ``::jsonb`` by the server.  We deliberately do NOT ``json.loads`` it in
  Python, which would turn 0.1000000000000000055511151231257827 into a
  binary float; jsonb keeps JSON numbers as ``numeric``.
* blob    bytea          <- BinaryType: PySpark gives ``bytearray``; bound as
  ``bytes`` (binary, no encoding step).
* tags    text[]         <- ArrayType(StringType): bound as a Python list with
  an explicit ``::text[]`` cast, so ``[]`` stays an empty array (not NULL),
  and ``None`` elements stay NULL elements; quoting/commas/braces/backslashes
  are escaped by psycopg, not by us.
* note    text, flag boolean, n bigint: bound natively.
* ratio   double precision <- DoubleType: bound as a float8 parameter
  (psycopg uses ``repr`` = shortest round-trip form), so NaN/±Infinity/-0.0
  and the last bit survive.
* SQL NULL in any column is bound as ``None`` -> NULL (never the string
  'None', never 'null' JSON; a JSON ``null`` document stays the jsonb value
  ``null`` because it arrives as the text "null").

Write semantics
---------------
``INSERT ... ON CONFLICT (id) DO UPDATE SET <every column> = EXCLUDED.<col>``
so a replayed epoch (after failure/restart) overwrites with identical values:
the sink is idempotent, which gives effectively-exactly-once results with the
at-least-once foreach contract.  Rows are sent one statement per row (via
``executemany``), so two versions of the same id inside one batch are applied
in order (last one wins) instead of failing with "ON CONFLICT DO UPDATE command
cannot affect row a second time".

Things Postgres itself cannot represent (documented, not silently changed):
* a NUL character (``\\x00``) inside a text value -> Postgres raises an error
  (we let it fail loudly rather than strip it);
* ``ref`` must be a valid UUID text, ``doc`` valid JSON text, else the row
  fails loudly;
* jsonb normalises whitespace / key order / duplicate keys of ``doc``
  (semantic equality is kept; if byte-exact JSON text is required the column
  would have to be ``json`` or ``text``).
* TimestampType rows reach Python through ``datetime.fromtimestamp`` in the
  *executor's* local time zone (pyspark/sql/types.py).  Run executors with
  ``TZ=UTC`` (``spark.executorEnv.TZ=UTC``) so that naive value is the UTC
  wall clock and no DST fold can make two instants collide.
"""

from __future__ import annotations

import datetime as _dt
import time
from decimal import Decimal
from typing import Any, List, Optional, Sequence

COLUMNS: Sequence[str] = (
    "id", "amount", "at", "day", "ref", "doc", "blob",
    "tags", "note", "flag", "n", "ratio",
)

# server-side casts so every parameter lands in the column type exactly
_CASTS = {
    "id": "text",
    "amount": "numeric",
    "at": "timestamp",
    "day": "date",
    "ref": "uuid",
    "doc": "jsonb",
    "blob": "bytea",
    "tags": "text[]",
    "note": "text",
    "flag": "boolean",
    "n": "bigint",
    "ratio": "float8",
}


def _qualified_identifier(table: str):
    from psycopg import sql

    parts = [p for p in table.split(".")]
    return sql.Identifier(*parts)


def _build_upsert(table: str):
    from psycopg import sql

    cols = [sql.Identifier(c) for c in COLUMNS]
    params = [
        sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(_CASTS[c]))
        for c in COLUMNS
    ]
    updates = [
        sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
        for c in COLUMNS
        if c != "id"
    ]
    return sql.SQL(
        "INSERT INTO {tbl} ({cols}) VALUES ({vals}) "
        "ON CONFLICT ({pk}) DO UPDATE SET {upd}"
    ).format(
        tbl=_qualified_identifier(table),
        cols=sql.SQL(", ").join(cols),
        vals=sql.SQL(", ").join(params),
        pk=sql.Identifier("id"),
        upd=sql.SQL(", ").join(updates),
    )


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


def _to_params(row: Any) -> tuple:
    amount = _get(row, "amount")
    if amount is not None and not isinstance(amount, Decimal):
        # Never go through float: str() of an int/str is exact.
        if isinstance(amount, float):
            raise TypeError("amount arrived as float; expected Decimal (DecimalType(38,18))")
        amount = Decimal(str(amount))

    at = _get(row, "at")
    if isinstance(at, _dt.datetime) and at.tzinfo is not None:
        at = at.astimezone(_dt.timezone.utc).replace(tzinfo=None)

    ref = _get(row, "ref")
    if ref is not None:
        ref = str(ref)

    doc = _get(row, "doc")  # JSON *text*; cast to jsonb server-side

    blob = _get(row, "blob")
    if blob is not None:
        blob = bytes(blob)

    tags = _get(row, "tags")
    if tags is not None:
        tags = [None if t is None else str(t) for t in tags]

    ratio = _get(row, "ratio")
    if ratio is not None:
        ratio = float(ratio)

    n = _get(row, "n")
    if n is not None:
        n = int(n)

    flag = _get(row, "flag")
    if flag is not None:
        flag = bool(flag)

    return (
        _get(row, "id"), amount, at, _get(row, "day"), ref, doc, blob,
        tags, _get(row, "note"), flag, n, ratio,
    )


class LedgerWriter:
    """Spark ``foreach`` writer (open/process/close protocol).

    ``batch_size``  rows buffered before a flush+commit (1 = every row is
                    committed immediately: lowest latency, what a real-time
                    trigger wants).  The rest is flushed in ``close``.
    ``max_delay_s`` a non-empty buffer older than this is flushed on the next
                    row even if ``batch_size`` is not reached.
    """

    def __init__(self, dsn: str, table: str = "ledger", batch_size: int = 1,
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

    # the object is pickled to executors: never pickle a live connection
    def __getstate__(self):
        state = self.__dict__.copy()
        state["_conn"] = None
        state["_sql"] = None
        state["_buf"] = []
        state["_first_ts"] = None
        return state

    def open(self, partition_id, epoch_id) -> bool:
        import psycopg

        self._conn = psycopg.connect(
            self.dsn, autocommit=False, connect_timeout=self.connect_timeout
        )
        with self._conn.cursor() as cur:
            # only affects timestamptz conversions; keeps them deterministic
            cur.execute("SET TIME ZONE 'UTC'")
        self._conn.commit()
        self._sql = _build_upsert(self.table)
        self._buf = []
        self._first_ts = None
        return True

    def process(self, row) -> None:
        if not self._buf:
            self._first_ts = time.monotonic()
        self._buf.append(_to_params(row))
        if (len(self._buf) >= self.batch_size
                or time.monotonic() - self._first_ts >= self.max_delay_s):
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        try:
            with self._conn.cursor() as cur:
                cur.executemany(self._sql, self._buf)
            self._conn.commit()
        except Exception:
            self._conn.rollback()
            raise
        self._buf = []
        self._first_ts = None

    def close(self, error) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if error is None:
                self._conn = conn
                self._flush()
            else:
                conn.rollback()  # the epoch will be replayed; upsert is idempotent
        finally:
            self._conn = None
            self._buf = []
            conn.close()
