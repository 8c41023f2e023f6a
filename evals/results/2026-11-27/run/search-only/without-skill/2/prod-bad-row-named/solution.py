"""Foreach writer for ``readings`` that fails loudly and names the bad row.

    from solution import ReadingsWriter
    df.writeStream.foreach(ReadingsWriter(dsn, "readings")).option("checkpointLocation", ...).start()

Table: readings(id text primary key, sensor text not null,
                score double precision check (score <> 'NaN'), note text)

Behaviour
---------
* Upsert on ``id`` (INSERT ... ON CONFLICT (id) DO UPDATE).
* Nothing is ever cleaned, truncated, clamped or skipped.  A row that cannot be
  stored exactly as sent makes the task fail with ``BadReadingRow`` whose
  message names the row's id (and the reason / the original Postgres error,
  which is also chained as ``__cause__``).
* Rows that came before the bad row in the same partition/epoch are committed
  before the exception is raised, so they stay in the table.
* Detected before talking to the DB (clear reason, no round trip):
  NUL (\\x00) characters in any text column (Postgres text cannot hold them),
  NaN score (violates the check constraint), missing id / sensor.
  Everything else (absurdly long id exceeding the primary-key btree limit,
  check / not-null violations, ...) is reported by Postgres; the writer then
  pins it down to the single offending row using savepoints.
* Rows are buffered and written in batches (fast path); if a batch fails it is
  rolled back to a savepoint and replayed row by row to find the culprit; the
  rows before it are committed.

Works with psycopg2 (preferred) or psycopg 3.
"""

import math as _math

_COLS = ("id", "sensor", "score", "note")
_BATCH = 500


class BadReadingRow(RuntimeError):
    """Raised when a row cannot be written; message names the row's id."""

    def __init__(self, row_id, reason):
        self.row_id = row_id
        self.reason = reason
        shown = repr(row_id)
        if isinstance(row_id, str) and shown != "'" + row_id + "'":
            # id contains characters repr() escapes (e.g. NUL): show it raw as well
            shown = "%s (raw: %s)" % (shown, row_id)
        length = len(row_id) if isinstance(row_id, str) else None
        msg = "readings row with id=%s%s could not be written: %s" % (
            shown,
            "" if length is None else " [id length %d]" % length,
            reason,
        )
        super(BadReadingRow, self).__init__(msg)


# ---------------------------------------------------------------- helpers

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
    if '"' in table:
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


def _validate(rid, sensor, score, note):
    """Return a reason string if the row cannot be stored exactly, else None."""
    if rid is None:
        return "id is NULL (primary key)"
    for name, v in (("id", rid), ("sensor", sensor), ("note", note)):
        if isinstance(v, str) and "\x00" in v:
            return "column %s contains a NUL (0x00) character at position %d, which Postgres text cannot store" % (
                name, v.index("\x00"))
    if sensor is None:
        return "sensor is NULL (column is NOT NULL)"
    if score is not None:
        try:
            f = float(score)
        except (TypeError, ValueError):
            return "score %r is not a number" % (score,)
        if _math.isnan(f):
            return "score is NaN (violates check score <> 'NaN')"
    return None


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = False
        return conn, "psycopg2"
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=False), "psycopg"


_CONN_CACHE = {}  # one connection per Python worker and DSN, reused across epochs


def _get_conn(dsn):
    entry = _CONN_CACHE.get(dsn)
    if entry is not None and not getattr(entry[0], "closed", True):
        return entry
    entry = _connect(dsn)
    _CONN_CACHE[dsn] = entry
    return entry


def _drop_conn(dsn):
    entry = _CONN_CACHE.pop(dsn, None)
    if entry is not None:
        try:
            entry[0].close()
        except Exception:
            pass


# ---------------------------------------------------------------- writer

class ReadingsWriter(object):
    """PySpark foreach writer object (open / process / close)."""

    def __init__(self, dsn, table="readings"):
        self.dsn = dsn
        self.table = table
        q = [_quote_ident(c) for c in _COLS]
        self._sql = (
            "INSERT INTO {t} ({cols}) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT ({id}) DO UPDATE SET {sets}"
        ).format(
            t=_quote_table(table),
            cols=", ".join(q),
            id=q[0],
            sets=", ".join("%s = EXCLUDED.%s" % (c, c) for c in q[1:]),
        )
        self._buf = None

    def open(self, partition_id, epoch_id):
        self._buf = []
        return True

    def process(self, row):
        rid = _get(row, "id")
        sensor = _get(row, "sensor")
        score = _get(row, "score")
        note = _get(row, "note")
        reason = _validate(rid, sensor, score, note)
        if reason is not None:
            # keep everything that came before this row, then fail naming it
            self._flush()
            raise BadReadingRow(rid, reason)
        self._buf.append((rid, sensor, None if score is None else float(score), note))
        if len(self._buf) >= _BATCH:
            self._flush()

    def close(self, error):
        try:
            if self._buf:
                if error is None:
                    self._flush()
                else:
                    # rows accepted before the failure should stay; never mask the
                    # original error with a secondary one
                    try:
                        self._flush()
                    except Exception:
                        pass
        finally:
            self._buf = None

    # ------------------------------------------------------------ internals

    def _flush(self):
        rows, self._buf = self._buf, []
        if not rows:
            return
        try:
            conn, driver = _get_conn(self.dsn)
        except Exception as e:
            raise BadReadingRow(rows[0][0], "cannot connect to Postgres: %s" % (e,)) from e
        try:
            with conn.cursor() as cur:
                cur.execute("SAVEPOINT batch_sp")
                try:
                    self._executemany(cur, driver, rows)
                    cur.execute("RELEASE SAVEPOINT batch_sp")
                except Exception:
                    cur.execute("ROLLBACK TO SAVEPOINT batch_sp")
                    # replay one by one to find the offending row
                    for r in rows:
                        cur.execute("SAVEPOINT row_sp")
                        try:
                            cur.execute(self._sql, r)
                        except Exception as e:
                            cur.execute("ROLLBACK TO SAVEPOINT row_sp")
                            conn.commit()  # rows before the bad one stay
                            raise BadReadingRow(r[0], "%s: %s" % (type(e).__name__, str(e).strip())) from e
                        cur.execute("RELEASE SAVEPOINT row_sp")
            conn.commit()
        except BadReadingRow:
            raise
        except Exception:
            try:
                conn.rollback()
            except Exception:
                pass
            _drop_conn(self.dsn)
            raise

    def _executemany(self, cur, driver, rows):
        if driver == "psycopg2":
            from psycopg2.extras import execute_batch

            execute_batch(cur, self._sql, rows, page_size=100)
        else:
            cur.executemany(self._sql, rows)


def make_writer(dsn, table="readings"):
    return ReadingsWriter(dsn, table)
