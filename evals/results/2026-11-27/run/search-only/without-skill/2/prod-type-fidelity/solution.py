"""Type-exact foreach sink: Spark (PySpark) rows -> Postgres ``ledger`` with upsert on id.

Usage::

    from solution import LedgerWriter
    (df.writeStream
       .foreach(LedgerWriter("postgresql://user:pw@host:5432/db", "ledger"))
       .option("checkpointLocation", "...")
       .start())

Why the old sink drifted and what this writer does instead
-----------------------------------------------------------
* ``amount`` numeric(38,18): PySpark hands us ``decimal.Decimal``.  Anything that
  goes through ``float`` loses digits.  We send the decimal as its exact
  plain-text form (``format(d, 'f')``) and cast it server-side with ``::numeric``.
* ``at`` timestamp(6): PySpark hands us a ``datetime`` with microseconds.  Going
  through epoch floats (``dt.timestamp()``) or a driver's time-zone handling can
  move the value by microseconds / hours.  We send the ISO text with exactly six
  fractional digits and cast with ``::timestamp`` (no time-zone conversion at all).
* ``ratio`` double precision: sent as ``repr(float)`` text (shortest round-trip
  form, so the same IEEE-754 double comes back), ``NaN``/``Infinity``/``-Infinity``
  spelled the Postgres way, and ``-0.0`` keeps its sign (a bare SQL literal
  ``-0.0`` would be parsed as numeric and lose it).
* ``day`` date -> ISO text ``::date``; ``ref`` -> ``::uuid``; ``doc`` -> ``::jsonb``;
  ``blob`` bytearray -> ``bytes`` (bytea); ``tags`` list -> ``::text[]`` (NULL
  elements and the empty array are preserved, and an empty list is *not*
  turned into NULL); ``flag`` bool; ``n`` int ``::bigint``; ``note``/``id`` text.
* ``None`` is passed through as SQL NULL for every column (the casts above are
  applied to NULL harmlessly).

Caveats inherent to the Postgres column types (not to this writer):
``uuid`` reads back in canonical lower-case form and ``jsonb`` reads back
normalised (key order/whitespace), i.e. semantically equal to what Spark sent.
A text value containing a NUL (\\x00) character cannot be stored in Postgres
text/jsonb at all; such a row raises instead of being silently altered.

Delivery: rows are buffered per (partition, epoch) and upserted in close(),
in one transaction, so an epoch's partition is either fully written or not at
all; a replayed epoch simply re-upserts the same ids (idempotent on ``id``).
Works with psycopg2 (preferred if installed) or psycopg 3.
"""

import datetime as _dt
import decimal as _decimal
import math as _math

# Column order, server-side cast for each column.
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
    ("ratio", "double precision"),
)

_CHUNK = 500  # rows per INSERT statement


# --------------------------------------------------------------------------
# value conversion (Python value as PySpark gives it -> exact DB parameter)
# --------------------------------------------------------------------------

def _dec(v):
    if v is None:
        return None
    if not isinstance(v, _decimal.Decimal):
        # never go through float; str() of int/str is exact
        v = _decimal.Decimal(str(v))
    if v.is_nan():
        return "NaN"
    if v.is_infinite():
        return "Infinity" if v > 0 else "-Infinity"
    return format(v, "f")  # plain digits, no exponent, all scale digits kept


def _ts(v):
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            # Column is timestamp WITHOUT time zone; PySpark normally gives naive
            # datetimes.  If an aware one shows up, keep its wall-clock time in UTC.
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return v.isoformat(sep=" ", timespec="microseconds")
    if isinstance(v, _dt.date):
        return _dt.datetime(v.year, v.month, v.day).isoformat(sep=" ", timespec="microseconds")
    return str(v)


def _date(v):
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        v = v.date()
    if isinstance(v, _dt.date):
        return v.isoformat()
    return str(v)


def _float(v):
    if v is None:
        return None
    f = float(v)
    if _math.isnan(f):
        return "NaN"
    if _math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return repr(f)  # shortest repr that round-trips to the identical double


def _bytes(v):
    if v is None:
        return None
    return bytes(v)  # PySpark gives bytearray; bytes adapts to bytea in both drivers


def _text_array(v):
    if v is None:
        return None
    return [None if x is None else str(x) for x in v]


def _str(v):
    return None if v is None else str(v)


def _bool(v):
    return None if v is None else bool(v)


def _int(v):
    return None if v is None else int(v)


_CONVERT = {
    "id": _str,
    "amount": _dec,
    "at": _ts,
    "day": _date,
    "ref": _str,
    "doc": _str,
    "blob": _bytes,
    "tags": _text_array,
    "note": _str,
    "flag": _bool,
    "n": _int,
    "ratio": _float,
}


def _get(row, name):
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


def _quote_ident(name):
    return '"' + name.replace('"', '""') + '"'


def _quote_table(table):
    # allow "schema.table"; already-quoted names are passed through unchanged
    if '"' in table:
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


# --------------------------------------------------------------------------
# driver handling
# --------------------------------------------------------------------------

def _connect(dsn):
    try:
        import psycopg2  # noqa: F401

        conn = psycopg2.connect(dsn)
        conn.autocommit = False
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=False)


# One connection per Python worker process and DSN, reused across epochs
# (real-time mode calls open/close for every epoch; reconnecting each time
# would dominate latency).
_CONN_CACHE = {}


def _get_conn(dsn):
    conn = _CONN_CACHE.get(dsn)
    if conn is not None and not getattr(conn, "closed", True):
        return conn
    conn = _connect(dsn)
    _CONN_CACHE[dsn] = conn
    return conn


def _drop_conn(dsn):
    conn = _CONN_CACHE.pop(dsn, None)
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass


# --------------------------------------------------------------------------
# the foreach writer
# --------------------------------------------------------------------------

class LedgerWriter(object):
    """PySpark foreach writer (object with open/process/close)."""

    def __init__(self, dsn, table="ledger"):
        self.dsn = dsn
        self.table = table
        cols = [c for c, _ in COLUMNS]
        qcols = ", ".join(_quote_ident(c) for c in cols)
        self._row_tpl = "(" + ", ".join("%s::" + t for _, t in COLUMNS) + ")"
        updates = ", ".join(
            "{0} = EXCLUDED.{0}".format(_quote_ident(c)) for c in cols if c != "id"
        )
        self._head = "INSERT INTO {} ({}) VALUES ".format(_quote_table(table), qcols)
        self._tail = " ON CONFLICT ({}) DO UPDATE SET {}".format(_quote_ident("id"), updates)
        self._buf = None

    # Spark calls open(partition_id, epoch_id) once per partition per epoch.
    def open(self, partition_id, epoch_id):
        self._buf = {}
        return True

    def process(self, row):
        params = tuple(_CONVERT[c](_get(row, c)) for c, _ in COLUMNS)
        if params[0] is None:
            raise ValueError("ledger row without id (primary key) cannot be upserted: %r" % (row,))
        # Last write for an id within this partition/epoch wins; also avoids
        # "ON CONFLICT DO UPDATE command cannot affect row a second time".
        self._buf.pop(params[0], None)
        self._buf[params[0]] = params

    def _flush(self):
        if not self._buf:
            return
        rows = [self._buf[k] for k in sorted(self._buf)]  # stable lock order across tasks
        conn = _get_conn(self.dsn)
        try:
            with conn.cursor() as cur:
                for i in range(0, len(rows), _CHUNK):
                    chunk = rows[i:i + _CHUNK]
                    sql = self._head + ", ".join([self._row_tpl] * len(chunk)) + self._tail
                    flat = [v for r in chunk for v in r]
                    cur.execute(sql, flat)
            conn.commit()
        except Exception:
            try:
                conn.rollback()
            except Exception:
                pass
            _drop_conn(self.dsn)
            raise
        self._buf = {}

    def close(self, error):
        try:
            if error is None:
                self._flush()
        finally:
            self._buf = None
        # On error Spark already fails/retries the task; nothing of this
        # partition-epoch was committed, so the replay re-upserts cleanly.


def make_writer(dsn, table="ledger"):
    return LedgerWriter(dsn, table)
