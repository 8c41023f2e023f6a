"""Foreach writer for ``readings`` that names the row that breaks it.

    query = (df.writeStream
               .foreach(ReadingsWriter(dsn, "readings"))
               .outputMode("update")
               .trigger(realTime="5 minutes")
               .option("checkpointLocation", ckpt)
               .start())

Contract:

* Each row is upserted on ``id`` and committed on its own (autocommit), so
  every row written before a bad one is durable in Postgres.
* Rows are sent exactly as received: no stripping of NUL bytes, no clipping
  of long ids, no NaN -> NULL "repair".  If Postgres (or the driver) refuses a
  row -- NUL byte in text, NaN score violating the CHECK, NULL sensor, an id
  too long for the primary-key index, ... -- the task fails with
  ``BadReadingError`` whose message contains the offending row's id
  (``repr`` of the full id, so even ids with NUL bytes are readable) and the
  underlying database error (chained as ``__cause__``).
* Nothing is caught and ignored.  A replay of the epoch after the fix is
  safe because the write is an idempotent upsert.

Works with psycopg2 (preferred when installed) or psycopg 3.
"""

import math


class BadReadingError(RuntimeError):
    """Raised when a single row cannot be written; names the row's id."""

    def __init__(self, row_id, reason, cause):
        self.row_id = row_id
        self.reason = reason
        msg = "readings sink: row with id=%r was rejected (%s): %s: %s" % (
            row_id,
            reason,
            type(cause).__name__,
            str(cause).strip(),
        )
        super().__init__(msg)


def _quote_ident(name):
    parts = name.split(".")
    return ".".join('"' + p.strip('"').replace('"', '""') + '"' for p in parts)


def _connect(dsn):
    try:
        import psycopg2  # type: ignore

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn
    except ImportError:
        import psycopg  # type: ignore

        return psycopg.connect(dsn, autocommit=True)


def _diagnose(rec):
    """Best-effort human hint about why a row was refused (not a filter)."""
    hints = []
    for col in ("id", "sensor", "note"):
        v = rec.get(col)
        if isinstance(v, str) and "\x00" in v:
            hints.append("NUL byte in %s" % col)
    s = rec.get("score")
    if isinstance(s, float) and math.isnan(s):
        hints.append("score is NaN")
    if rec.get("sensor") is None:
        hints.append("sensor is NULL")
    rid = rec.get("id")
    if rid is None:
        hints.append("id is NULL")
    elif isinstance(rid, str) and len(rid.encode("utf-8", "surrogatepass")) > 2000:
        hints.append("id is %d characters long" % len(rid))
    return "; ".join(hints) or "database rejected the row"


class ReadingsWriter:
    """PySpark ForeachWriter-style object (open / process / close)."""

    COLUMNS = ("id", "sensor", "score", "note")

    def __init__(self, dsn, table="readings"):
        self.dsn = dsn
        self.table = table
        self._conn = None
        self._cur = None
        tbl = _quote_ident(table)
        self._sql = (
            "INSERT INTO %s (\"id\", \"sensor\", \"score\", \"note\") "
            "VALUES (%%s::text, %%s::text, %%s::double precision, %%s::text) "
            "ON CONFLICT (\"id\") DO UPDATE SET "
            "\"sensor\" = EXCLUDED.\"sensor\", \"score\" = EXCLUDED.\"score\", "
            "\"note\" = EXCLUDED.\"note\"" % tbl
        )

    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self._conn = _connect(self.dsn)
        self._cur = self._conn.cursor()
        return True

    def process(self, row):
        rec = row.asDict() if hasattr(row, "asDict") else dict(row)
        params = [rec.get(c) for c in self.COLUMNS]
        try:
            self._cur.execute(self._sql, params)
        except Exception as exc:
            # Autocommit: earlier rows are already committed and stay.
            raise BadReadingError(rec.get("id"), _diagnose(rec), exc) from exc

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
        finally:
            self._cur = None
            self._conn = None
        # If ``error`` is not None PySpark re-raises it after close(), so the
        # task fails with the BadReadingError naming the row.
