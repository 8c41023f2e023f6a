"""Type-faithful foreach writer for the Postgres table ``ledger``.

Usage::

    query = (df.writeStream
               .foreach(LedgerWriter(dsn, "ledger"))
               .outputMode("update")
               .trigger(realTime="5 minutes")          # or any trigger
               .option("checkpointLocation", ckpt)
               .start())

Why values now read back exactly:

* Nothing is ever converted to ``float`` or formatted by hand.  The Python
  objects PySpark hands to ``process`` are passed to the driver as query
  parameters:
    - DecimalType(38,18) -> ``decimal.Decimal`` (exact digits, exact scale)
      -> ``numeric(38,18)``.  The old "last digits off" bug is what happens
      when a Decimal goes through float; we never do that.
    - TimestampType -> ``datetime.datetime`` with full microseconds ->
      ``timestamp(6)``.  No ``strftime``/millisecond formatting, no epoch
      float arithmetic (the classic source of microsecond drift).
    - DateType -> ``datetime.date`` -> ``date``.
    - DoubleType -> ``float``; the drivers send ``repr(float)`` (shortest
      round-trip form), including NaN/Infinity, so the double is bit-exact.
    - LongType -> ``int`` -> ``bigint``; BooleanType -> ``bool``.
    - BinaryType -> ``bytearray``/``bytes`` -> ``bytea`` (converted to
      ``bytes`` explicitly so every driver adapts it as binary).
    - ArrayType(StringType) -> ``list[str|None]`` -> ``text[]`` (element
      NULLs and empty arrays preserved; explicit ``::text[]`` cast so an
      empty or all-NULL array is typed correctly).
    - ``ref``/``doc`` are strings; they are cast in SQL with ``::uuid`` and
      ``::jsonb`` so Postgres parses them itself (nothing re-serialised in
      Python).
* ``None`` is passed as ``None`` -> SQL NULL for every column.
* Every row is an ``INSERT ... ON CONFLICT (id) DO UPDATE`` that sets every
  non-key column from ``EXCLUDED`` -- including NULLs -- so an upsert fully
  replaces the previous values.

Each row is committed as soon as it is written (autocommit): in real-time
mode a task lives for the whole (long) batch, so waiting for ``close`` would
hide rows for minutes.  A failing row raises an error that names its id, so
the task fails instead of silently losing data; replays are harmless because
the write is an idempotent upsert on ``id``.

Works with psycopg2 (preferred when installed) or psycopg 3.
"""

import datetime as _dt
import decimal as _decimal

# Column name -> SQL cast used on the bound parameter.  The casts make the
# statement independent of how a particular driver types its parameters.
_COLUMNS = [
    ("id", "text"),
    ("amount", "numeric(38,18)"),
    ("at", "timestamp(6)"),
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


def _quote_ident(name):
    """Quote a possibly schema-qualified table name (schema.table)."""
    parts = name.split(".")
    return ".".join('"' + p.strip('"').replace('"', '""') + '"' for p in parts)


def _connect(dsn):
    """Open an autocommit connection with psycopg2, falling back to psycopg 3."""
    try:
        import psycopg2  # type: ignore

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn, "psycopg2"
    except ImportError:
        import psycopg  # type: ignore

        conn = psycopg.connect(dsn, autocommit=True)
        return conn, "psycopg"


def _to_param(col, value):
    """Hand the value to the driver without changing it."""
    if value is None:
        return None
    if col == "blob":
        # PySpark gives bytearray; bytes is adapted as bytea by every driver.
        return bytes(value)
    if col == "tags":
        return list(value)
    if col == "amount" and not isinstance(value, _decimal.Decimal):
        # Defensive: never let a float sneak in; go through its exact repr.
        return _decimal.Decimal(str(value))
    if col == "at" and isinstance(value, _dt.datetime) and value.tzinfo is not None:
        # Column is timestamp WITHOUT time zone: keep wall-clock value as sent.
        return value.replace(tzinfo=None)
    return value


class LedgerWriter:
    """PySpark ForeachWriter-style object (open / process / close)."""

    def __init__(self, dsn, table="ledger"):
        self.dsn = dsn
        self.table = table
        self._conn = None
        self._cur = None
        cols = [c for c, _ in _COLUMNS]
        tbl = _quote_ident(table)
        col_list = ", ".join('"%s"' % c for c in cols)
        values = ", ".join("%%s::%s" % t for _, t in _COLUMNS)
        updates = ", ".join('"%s" = EXCLUDED."%s"' % (c, c) for c in cols if c != "id")
        self._sql = (
            "INSERT INTO %s (%s) VALUES (%s) ON CONFLICT (\"id\") DO UPDATE SET %s"
            % (tbl, col_list, values, updates)
        )

    # -- ForeachWriter protocol -------------------------------------------
    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self._conn, self._driver = _connect(self.dsn)
        self._cur = self._conn.cursor()
        return True

    def process(self, row):
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        params = [_to_param(c, d.get(c)) for c, _ in _COLUMNS]
        try:
            self._cur.execute(self._sql, params)
        except Exception as exc:  # name the row, never swallow
            raise RuntimeError(
                "ledger upsert failed for id=%r (partition %s, epoch %s): %s"
                % (d.get("id"), self.partition_id, self.epoch_id, exc)
            ) from exc

    def close(self, error):
        try:
            if self._cur is not None:
                self._cur.close()
        except Exception:
            pass
        try:
            if self._conn is not None:
                self._conn.close()
        finally:
            self._cur = None
            self._conn = None
        # If ``error`` is set, PySpark re-raises it after close(); the task
        # fails and the (idempotent) epoch is replayed.  Nothing is hidden.


# Alias so callers can use either spelling.
def make_ledger_writer(dsn, table="ledger"):
    return LedgerWriter(dsn, table)
