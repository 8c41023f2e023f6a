"""Foreach writer for ``readings`` that fails loudly and names the bad row.

Usage::

    (df.writeStream
       .foreach(ReadingsWriter(dsn, "readings"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")          # or any other trigger
       .start())

Behaviour
---------
* Each row is upserted (``INSERT ... ON CONFLICT (id) DO UPDATE``) on an
  autocommit connection, i.e. it is committed as soon as ``process`` returns.
  Rows written before a bad row therefore stay in the table when the task
  fails, and they are visible immediately (important in real-time mode, where
  ``close`` only runs at the end of a long epoch).
* A bad row is never dropped, truncated, or "cleaned": values are sent exactly
  as received.  Obvious garbage is detected *before* sending (NUL characters
  in text, NaN score, NULL id / sensor, un-encodable text) and everything the
  database rejects (check constraint, index-row-size limit for absurdly long
  ids, encoding errors, ...) is caught.  In both cases the writer raises
  ``BadReadingError`` whose message starts with the offending row's id, e.g.::

      BadReadingError: readings row id='sensor-17#42' rejected: score is NaN
      (violates CHECK score <> 'NaN') ...

  The exception propagates out of ``process``; Spark calls ``close(error)``,
  fails the task (retrying it per ``spark.task.maxFailures``) and finally the
  query with a StreamingQueryException carrying this message.  Because the
  upsert is idempotent, retries re-write the earlier rows harmlessly and fail
  again on the same row, naming it again.
* The id is reported in full (``repr`` so control characters are visible);
  very long ids are additionally summarised with their length and a prefix at
  the start of the message, so on-call can spot them in truncated log lines.
"""

import math as _math


class BadReadingError(ValueError):
    """Raised when a row cannot be written; the message names the row's id."""


def _quote_ident(name):
    return '"' + str(name).replace('"', '""') + '"'


def _quote_table(table):
    table = str(table).strip()
    if table.startswith('"'):
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


_COLUMNS = ("id", "sensor", "score", "note")


def _describe_id(rid):
    """Human-readable, complete identification of a row id for error messages."""
    if rid is None:
        return "id=None (NULL id)"
    r = repr(rid)
    if isinstance(rid, str) and len(rid) > 200:
        return "id=%r... (length %d chars); full id=%s" % (rid[:80], len(rid), r)
    return "id=%s" % r


def _row_dict(row):
    if hasattr(row, "asDict"):
        return row.asDict(recursive=False)
    if isinstance(row, dict):
        return dict(row)
    return dict(zip(_COLUMNS, row))


def _validate(d):
    """Return a list of problems with this row (empty if it looks writable)."""
    problems = []
    rid = d.get("id")
    if rid is None:
        problems.append("id is NULL (primary key)")
    if d.get("sensor") is None:
        problems.append("sensor is NULL (column is NOT NULL)")
    for col in ("id", "sensor", "note"):
        v = d.get(col)
        if v is None:
            continue
        if not isinstance(v, str):
            problems.append("%s is not text (%s)" % (col, type(v).__name__))
            continue
        if "\x00" in v:
            problems.append(
                "%s contains a NUL (0x00) character at offset %d; Postgres text "
                "cannot store NUL" % (col, v.index("\x00"))
            )
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            problems.append("%s is not valid Unicode text (%s)" % (col, e))
    score = d.get("score")
    if score is not None:
        try:
            f = float(score)
        except (TypeError, ValueError):
            problems.append("score is not a number (%r)" % (score,))
        else:
            if _math.isnan(f):
                problems.append("score is NaN (violates CHECK score <> 'NaN')")
    return problems


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=True)


class ReadingsWriter(object):
    """PySpark foreach writer (open/process/close). ``ReadingsWriter(dsn, table)`` is the writer."""

    def __init__(self, dsn, table="readings"):
        self.dsn = dsn
        self.table = table
        self._conn = None
        self._cur = None
        self._partition_id = None
        self._epoch_id = None
        self._sql = (
            "INSERT INTO {t} ({c}) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT ({pk}) DO UPDATE SET {s} = EXCLUDED.{s}, "
            "{sc} = EXCLUDED.{sc}, {n} = EXCLUDED.{n}"
        ).format(
            t=_quote_table(table),
            c=", ".join(_quote_ident(c) for c in _COLUMNS),
            pk=_quote_ident("id"),
            s=_quote_ident("sensor"),
            sc=_quote_ident("score"),
            n=_quote_ident("note"),
        )

    # only configuration travels to the executors
    def __getstate__(self):
        return {"dsn": self.dsn, "table": self.table}

    def __setstate__(self, state):
        self.__init__(state["dsn"], state["table"])

    def open(self, partition_id, epoch_id):
        self._partition_id = partition_id
        self._epoch_id = epoch_id
        self._conn = _connect(self.dsn)
        self._cur = self._conn.cursor()
        return True

    def _fail(self, d, reason, cause=None):
        msg = "%s row %s rejected: %s [table=%s, partition=%s, epoch=%s, sensor=%r, score=%r, note=%r]" % (
            "readings" if self.table is None else self.table,
            _describe_id(d.get("id")),
            reason,
            self.table,
            self._partition_id,
            self._epoch_id,
            d.get("sensor"),
            d.get("score"),
            d.get("note"),
        )
        err = BadReadingError(msg)
        if cause is not None:
            raise err from cause
        raise err

    def process(self, row):
        d = _row_dict(row)
        problems = _validate(d)
        if problems:
            self._fail(d, "; ".join(problems))
        score = d.get("score")
        params = (
            d.get("id"),
            d.get("sensor"),
            None if score is None else float(score),
            d.get("note"),
        )
        try:
            self._cur.execute(self._sql, params)
        except Exception as e:  # DB-side rejection (constraint, size limit, ...)
            detail = str(e).strip() or type(e).__name__
            self._fail(d, "Postgres error %s: %s" % (type(e).__name__, detail), e)

    def close(self, error):
        # Every successful upsert is already committed (autocommit); nothing to
        # flush or roll back.  If error is set Spark re-raises it itself.
        for obj in (self._cur, self._conn):
            try:
                if obj is not None:
                    obj.close()
            except Exception:
                pass
        self._cur = None
        self._conn = None
