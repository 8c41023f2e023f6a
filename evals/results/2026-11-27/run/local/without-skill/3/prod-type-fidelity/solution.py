"""Type-exact foreach writer: Spark rows -> Postgres ``ledger`` with upsert on ``id``.

Usage::

    (df.writeStream
       .foreach(LedgerWriter("postgresql://user:pw@host/db", "public.ledger"))
       .option("checkpointLocation", ...)
       .trigger(realTime="5 minutes")          # or processingTime / availableNow
       .start())

Why the old sink lost digits / microseconds, and what this writer does instead
-----------------------------------------------------------------------------
Every value is handed to psycopg 3 as the Python object PySpark produced, and
every placeholder carries an explicit cast to the column's Postgres type, so
nothing is ever routed through ``float``, ``str(datetime)`` with a
millisecond format, ``json.loads``/``json.dumps`` or a driver-side guess:

=====================  ======================  ===============================
Spark type             Python value            Sent as
=====================  ======================  ===============================
DecimalType(38,18)     decimal.Decimal         ``%s::numeric`` (exact text of
                                               the Decimal, all 18 decimals)
TimestampType          naive datetime (µs)     ``%s::timestamp`` – isoformat
                                               with all 6 fractional digits
DateType               datetime.date           ``%s::date``
StringType (uuid)      str                     ``%s::uuid``
StringType (json)      str                     ``%s::jsonb`` – the JSON *text*
                                               is parsed by Postgres, so large /
                                               long numbers stay ``numeric`` and
                                               are never rounded through float
BinaryType             bytearray               ``%s::bytea`` (as bytes)
ArrayType(StringType)  list[str | None]        ``%s::text[]`` (NULL elements
                                               and empty arrays preserved)
StringType             str                     ``%s::text``
BooleanType            bool                    ``%s::boolean``
LongType               int                     ``%s::bigint``
DoubleType             float                   ``%s::float8`` – psycopg writes
                                               ``repr(float)``, which is the
                                               shortest string that round-trips
                                               exactly; NaN/±Infinity/-0.0 kept
=====================  ======================  ===============================

``None`` is passed through as SQL NULL for every column (it is never replaced
by a default).

Timestamps: PySpark converts a TimestampType value to a *naive* ``datetime`` in
the Python worker's local time zone (``TimestampType.fromInternal``).  The
column is ``timestamp`` (without time zone), so we store exactly that wall-clock
value with full microsecond precision; this is also what Spark's own JDBC sink
stores (JVM-local wall clock).  Run executors with ``TZ=UTC`` (the Databricks
default) so that the stored wall clock is UTC and there is no DST ambiguity.
``fold`` is irrelevant because the column has no zone.

Values Postgres itself cannot represent identically are *not* silently
altered; the write fails instead (query fails, batch is retried from the
checkpoint after the fix):
* a ``text`` value containing NUL (``\\x00``) – Postgres rejects it;
* ``ref`` that is not a valid UUID – rejected by the ``::uuid`` cast.
Normalisations that are inherent to the column types (and therefore not data
loss): ``uuid`` is returned in lower-case canonical form, ``jsonb`` is
returned re-serialised (whitespace / key order / duplicate keys) with the same
values, numbers kept at full precision.

Delivery: ``INSERT ... ON CONFLICT (id) DO UPDATE`` is idempotent, so rows
replayed after a failure converge to the same final state (at-least-once
delivery + idempotent upsert).  Rows are committed as they are processed
(``flush_rows=1`` by default) because in real-time mode ``close()`` is only
called at the end of a (long) batch; set ``flush_rows`` > 1 to batch round
trips for micro-batch queries.  Within a batch, rows for the same id are applied
in arrival order (last one wins).
"""

from __future__ import annotations

import decimal

import psycopg
from psycopg import sql

# Column order and the exact Postgres type each placeholder is cast to.
COLUMNS = (
    ("id", "text"),
    ("amount", "numeric"),
    ("at", "timestamp"),
    ("day", "date"),
    ("ref", "uuid"),
    ("doc", "jsonb"),
    ("blob", "bytea"),
    ("tags", "text[]"),
    ("note", "text"),
    ("flag", "boolean"),
    ("n", "bigint"),
    ("ratio", "float8"),
)


def _table_identifier(table: str) -> sql.Composable:
    """'ledger' or 'schema.ledger' -> safely quoted identifier."""
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return sql.Identifier(*parts)


def build_upsert(table: str) -> sql.Composed:
    cols = [c for c, _ in COLUMNS]
    placeholders = [
        sql.SQL("{}::{}").format(sql.Placeholder(), sql.SQL(pgtype))
        for _, pgtype in COLUMNS
    ]
    updates = [
        sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
        for c in cols
        if c != "id"
    ]
    return sql.SQL(
        "INSERT INTO {t} ({cols}) VALUES ({vals}) "
        "ON CONFLICT ({pk}) DO UPDATE SET {upd}"
    ).format(
        t=_table_identifier(table),
        cols=sql.SQL(", ").join(map(sql.Identifier, cols)),
        vals=sql.SQL(", ").join(placeholders),
        pk=sql.Identifier("id"),
        upd=sql.SQL(", ").join(updates),
    )


def _get(row, name):
    # pyspark.sql.Row supports both attribute and key access; dicts only keys.
    try:
        return row[name]
    except (KeyError, TypeError, IndexError, ValueError):
        return getattr(row, name, None)


def row_to_params(row) -> tuple:
    """Convert one Spark Row to the parameter tuple, without changing any value."""
    amount = _get(row, "amount")
    if amount is not None and not isinstance(amount, decimal.Decimal):
        # Never accept a float here: that is exactly how digits get lost.
        if isinstance(amount, float):
            raise TypeError("amount must arrive as Decimal (DecimalType(38,18)), got float")
        amount = decimal.Decimal(amount)

    blob = _get(row, "blob")
    if blob is not None and not isinstance(blob, bytes):
        blob = bytes(blob)  # PySpark gives bytearray; bytes is the same octets

    tags = _get(row, "tags")
    if tags is not None:
        tags = list(tags)  # keep element order, None elements stay NULL

    return (
        _get(row, "id"),
        amount,
        _get(row, "at"),
        _get(row, "day"),
        _get(row, "ref"),
        _get(row, "doc"),  # JSON text, cast by Postgres – never json.loads()
        blob,
        tags,
        _get(row, "note"),
        _get(row, "flag"),
        _get(row, "n"),
        _get(row, "ratio"),
    )


class LedgerWriter:
    """Foreach writer (open / process / close) for ``DataStreamWriter.foreach``.

    The object is pickled to the executors, so it only holds plain settings;
    the connection is created in ``open`` on the executor.
    """

    def __init__(self, dsn: str, table: str = "ledger", flush_rows: int = 1,
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.flush_rows = max(1, int(flush_rows))
        self.connect_timeout = connect_timeout
        self._conn = None
        self._buf: list[tuple] = []
        self._query = None

    # -- foreach writer protocol ---------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        self._buf = []
        self._query = build_upsert(self.table)
        self._conn = psycopg.connect(
            self.dsn,
            autocommit=False,
            connect_timeout=self.connect_timeout,
            application_name="ledger-foreach-writer",
            # Output side only (for anyone reading in this session): make
            # Postgres print floats with shortest-exact digits.
            options="-c extra_float_digits=3",
        )
        return True

    def process(self, row) -> None:
        self._buf.append(row_to_params(row))
        if len(self._buf) >= self.flush_rows:
            self._flush()

    def close(self, error) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            if error is None:
                self._flush(conn)
            else:
                conn.rollback()
        finally:
            self._buf = []
            conn.close()

    # -- helpers --------------------------------------------------------------
    def _flush(self, conn=None) -> None:
        conn = conn or self._conn
        if not self._buf:
            return
        with conn.cursor() as cur:
            # executemany = one statement per row (pipelined), so several rows
            # with the same id in one flush are applied in order, last wins,
            # without "ON CONFLICT ... cannot affect row a second time".
            cur.executemany(self._query, self._buf)
        conn.commit()
        self._buf = []


__all__ = ["LedgerWriter", "build_upsert", "row_to_params", "COLUMNS"]
