"""Type-exact foreach writer: Spark rows -> Postgres ``ledger`` (upsert on id).

Usage::

    query = (df.writeStream
               .foreach(LedgerWriter(dsn, "ledger"))
               .option("checkpointLocation", ckpt)
               .start())

Why values survive the round trip unchanged
-------------------------------------------
The usual causes of "amounts off in the last digits" and "timestamps off by
microseconds" are a Decimal or datetime going through a Python ``float``
(``float(amount)``, ``ts.timestamp()``) or through a driver/ORM that does the
same.  This writer never does that.  Every value is turned into the *text* form
that Postgres' own input function for the target column type parses exactly,
and every placeholder carries an explicit cast to the column type:

* numeric(38,18)    <- ``str(Decimal)``            ``::numeric``   (exact, no float)
* timestamp(6)      <- ``datetime.isoformat()``     ``::timestamp`` (all 6 microsecond digits)
* date              <- ``date.isoformat()``         ``::date``
* uuid              <- the string                   ``::uuid``
* jsonb             <- the JSON text                ``::jsonb``
* bytea             <- ``bytes`` (driver binary)    ``::bytea``
* text[]            <- array literal built here     ``::text[]``    (NULL elements, quotes,
                                                                     backslashes, empty array)
* text              <- the string                   ``::text``
* boolean / bigint  <- Python bool / int            ``::boolean`` / ``::bigint``
* double precision  <- ``repr(float)``              ``::float8``    (shortest round-trip repr;
                                                                     NaN, +/-Infinity, -0.0 kept)

``None`` (Spark null) is passed as SQL NULL for every column, including the
array column (NULL array, not an empty one).

Because everything is sent as text + explicit cast, the result does not depend
on which driver is installed (psycopg2 or psycopg 3) or on how that driver
would adapt Python objects by default.

Notes / assumptions
-------------------
* Spark hands TimestampType values to Python as *naive* ``datetime`` objects
  (wall-clock time of the worker's time zone, which is the session time zone in
  a normal deployment; run with TZ/spark.sql.session.timeZone aligned, e.g.
  UTC).  The wall-clock value with its microseconds is written verbatim into the
  ``timestamp`` (without time zone) column -- no epoch/float conversion.  If a
  tz-aware datetime ever arrives it is converted to UTC first and stored as
  UTC wall-clock time.
* jsonb stores the *value* of the JSON document (it normalises whitespace and
  key order); read ``doc`` back as jsonb/JSON to compare values.  If byte-exact
  JSON text is required the column would have to be ``json`` or ``text``.
* Postgres text cannot contain the NUL character (\\x00); such a value is
  rejected by the server and the task fails loudly rather than silently
  altering the data.
* Each row is upserted immediately in ``process`` on an autocommit connection,
  so it is durable and visible at once (this suits real-time mode, where an
  epoch can last a long time and ``close`` is only called at its end).  The
  upsert is idempotent, so replays after a failure converge to the same rows.
"""

import datetime as _dt
import decimal as _decimal
import math as _math

# (column, SQL cast) in table order.
_COLUMNS = (
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


def _quote_ident(name):
    return '"' + str(name).replace('"', '""') + '"'


def _quote_table(table):
    """Quote ``table`` or ``schema.table`` (already-quoted input is kept)."""
    table = str(table).strip()
    if table.startswith('"'):
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


def _build_upsert_sql(table):
    cols = ", ".join(_quote_ident(c) for c, _ in _COLUMNS)
    vals = ", ".join("%s::" + cast for _, cast in _COLUMNS)
    updates = ", ".join(
        "{0} = EXCLUDED.{0}".format(_quote_ident(c)) for c, _ in _COLUMNS if c != "id"
    )
    return "INSERT INTO {t} ({cols}) VALUES ({vals}) ON CONFLICT ({pk}) DO UPDATE SET {upd}".format(
        t=_quote_table(table), cols=cols, vals=vals, pk=_quote_ident("id"), upd=updates
    )


# ---------------------------------------------------------------- converters
def _text(v):
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


def _numeric(v):
    if v is None:
        return None
    if isinstance(v, _decimal.Decimal):
        if v.is_nan():
            return "NaN"
        # str(Decimal) is exact (may use exponent form, which numeric_in accepts)
        return str(v)
    if isinstance(v, float):
        # should not happen for DecimalType; repr is the exact shortest form
        return _float8(v)
    return str(v)


def _timestamp(v):
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        # timespec='microseconds' always emits the 6 fractional digits
        return v.isoformat(sep=" ", timespec="microseconds")
    if isinstance(v, _dt.date):
        return v.isoformat()
    return str(v)


def _date(v):
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        v = v.date()
    if isinstance(v, _dt.date):
        return v.isoformat()
    return str(v)


def _bytea(v):
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, (list, tuple)):
        return bytes(v)
    raise TypeError("blob must be bytes-like, got %r" % type(v))


def _array_elem(x):
    if x is None:
        return "NULL"
    s = x if isinstance(x, str) else str(x)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text_array(v):
    if v is None:
        return None
    return "{" + ",".join(_array_elem(x) for x in v) + "}"


def _bool(v):
    if v is None:
        return None
    return bool(v)


def _bigint(v):
    if v is None:
        return None
    return int(v)


def _float8(v):
    if v is None:
        return None
    f = float(v)
    if _math.isnan(f):
        return "NaN"
    if _math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return repr(f)  # shortest string that round-trips to the same double


_CONVERTERS = {
    "id": _text,
    "amount": _numeric,
    "at": _timestamp,
    "day": _date,
    "ref": _text,
    "doc": _text,
    "blob": _bytea,
    "tags": _text_array,
    "note": _text,
    "flag": _bool,
    "n": _bigint,
    "ratio": _float8,
}


def _row_params(row):
    if hasattr(row, "asDict"):
        d = row.asDict(recursive=False)
    elif isinstance(row, dict):
        d = row
    else:
        d = dict(zip([c for c, _ in _COLUMNS], row))
    if d.get("id") is None:
        raise ValueError("ledger row without id cannot be upserted: %r" % (d,))
    return tuple(_CONVERTERS[c](d.get(c)) for c, _ in _COLUMNS)


def _connect(dsn):
    try:
        import psycopg2  # noqa: F401

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=True)


# -------------------------------------------------------------------- writer
class LedgerWriter(object):
    """PySpark foreach writer (object with open/process/close).

    ``LedgerWriter(dsn, table)`` *is* the writer: pass it to
    ``df.writeStream.foreach(...)``.  Only ``dsn``/``table`` are pickled to the
    executors; the connection is opened in ``open`` on the executor.
    """

    def __init__(self, dsn, table="ledger"):
        self.dsn = dsn
        self.table = table
        self._sql = _build_upsert_sql(table)
        self._conn = None
        self._cur = None

    def __getstate__(self):
        return {"dsn": self.dsn, "table": self.table}

    def __setstate__(self, state):
        self.__init__(state["dsn"], state["table"])

    def open(self, partition_id, epoch_id):
        self._conn = _connect(self.dsn)
        self._cur = self._conn.cursor()
        return True

    def process(self, row):
        # autocommit: each upsert is its own transaction, visible immediately.
        self._cur.execute(self._sql, _row_params(row))

    def close(self, error):
        try:
            if self._cur is not None:
                self._cur.close()
        except Exception:
            pass
        try:
            if self._conn is not None:
                self._conn.close()
        except Exception:
            pass
        self._cur = None
        self._conn = None
        # If error is not None Spark itself fails/retries the task with that
        # error; nothing to roll back (each upsert is committed on its own and
        # is idempotent, so a replay converges to the same rows).
