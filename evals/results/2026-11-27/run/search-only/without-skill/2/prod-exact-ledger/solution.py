"""Exactly-once foreach writer for the append-only ledger ``payments``.

    from solution import PaymentsWriter
    (df.writeStream
       .foreach(PaymentsWriter(dsn, "payments"))
       .option("checkpointLocation", ...)
       .start())

Table: payments(event_id text primary key, account text not null, amount numeric(18,2) not null)

Exactly-once design
-------------------
Spark's foreach sink is at-least-once: after a failure an epoch is replayed,
possibly split across tasks differently, so (partition_id, epoch_id) cannot be
used to deduplicate.  The business key ``event_id`` can: the write is an
idempotent ``INSERT ... ON CONFLICT (event_id) DO NOTHING``.

* Replays / re-splits / killed executors: whatever was committed before stays;
  re-sent payments hit the primary key and are not inserted again.  An
  uncommitted transaction of a killed task is rolled back by Postgres and the
  replay writes it.  => every payment exactly once.
* Original amount: amounts are sent as exact decimal text (never float).  An
  amount that numeric(18,2) could only store by rounding (more than 2
  decimals, or too many digits) raises instead of being rounded.
* No hidden errors: a payment whose event_id already exists with a DIFFERENT
  account/amount is not silently ignored -- the task fails with
  ``PaymentConflict`` naming the event_id (same for conflicting duplicates
  inside one epoch).  NULL account/amount/event_id raise too.  Nothing is
  skipped or swallowed; ``close(error)`` never commits after a failure.
* Postgres restart mid-epoch: the transaction is rolled back (or its commit
  outcome is unknown); the whole partition-epoch is retried on a fresh
  connection with backoff -- safe because the write is idempotent -- and if
  Postgres does not come back in time the error is raised so Spark retries
  the task / fails the query visibly.

Rows are buffered per partition-epoch and written in one transaction at
``close()``.  Works with psycopg2 (preferred) or psycopg 3.
"""

import decimal as _decimal
import time as _time

_CHUNK = 1000
_CENT = _decimal.Decimal("0.01")
_MAX_ABS = _decimal.Decimal(10) ** 16  # numeric(18,2): at most 16 integer digits


class PaymentConflict(RuntimeError):
    pass


class InvalidPayment(ValueError):
    pass


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


def _exact_amount(event_id, v):
    if v is None:
        raise InvalidPayment("payment %r has NULL amount" % (event_id,))
    if isinstance(v, _decimal.Decimal):
        d = v
    elif isinstance(v, float):
        d = _decimal.Decimal(repr(v))  # shortest decimal the float prints as
    else:
        d = _decimal.Decimal(str(v))
    if not d.is_finite():
        raise InvalidPayment("payment %r has non-finite amount %s" % (event_id, d))
    q = d.quantize(_CENT)
    if q != d:
        raise InvalidPayment(
            "payment %r amount %s has more than 2 decimals; numeric(18,2) would round it" % (event_id, d))
    if abs(q) >= _MAX_ABS:
        raise InvalidPayment("payment %r amount %s does not fit numeric(18,2)" % (event_id, d))
    return q


def _driver():
    try:
        import psycopg2

        return "psycopg2", psycopg2
    except ImportError:
        import psycopg

        return "psycopg", psycopg


def _is_connection_error(exc, mod):
    # connection lost / server restarting / commit outcome unknown
    names = ("OperationalError", "InterfaceError")
    if any(isinstance(exc, getattr(mod, n)) for n in names if hasattr(mod, n)):
        return True
    sqlstate = getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None)
    # 08xxx connection exception, 57P01-57P03 admin shutdown / crash / cannot connect now
    return bool(sqlstate) and (sqlstate.startswith("08") or sqlstate in ("57P01", "57P02", "57P03"))


class PaymentsWriter(object):
    """PySpark foreach writer object (open / process / close)."""

    def __init__(self, dsn, table="payments", retries=8, backoff_seconds=1.0):
        self.dsn = dsn
        self.table = table
        self.retries = int(retries)
        self.backoff_seconds = float(backoff_seconds)
        t = _quote_table(table)
        self._head = "INSERT INTO {t} (event_id, account, amount) VALUES ".format(t=t)
        self._tpl = "(%s, %s, %s::numeric)"
        self._tail = " ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
        self._check_sql = (
            "SELECT event_id, account, amount FROM {t} WHERE event_id = ANY(%s::text[])".format(t=t)
        )
        self._buf = None
        self._conn = None

    # -- Spark API ---------------------------------------------------------

    def open(self, partition_id, epoch_id):
        # (partition_id, epoch_id) is NOT used for dedup: replays may re-split data.
        self._close_conn()
        self._buf = {}
        return True

    def process(self, row):
        eid = _get(row, "event_id")
        account = _get(row, "account")
        if eid is None:
            raise InvalidPayment("payment with NULL event_id: %r" % (row,))
        if account is None:
            raise InvalidPayment("payment %r has NULL account" % (eid,))
        amount = _exact_amount(eid, _get(row, "amount"))
        rec = (str(eid), str(account), amount)
        prev = self._buf.get(rec[0])
        if prev is not None and (prev[1] != rec[1] or prev[2] != rec[2]):
            raise PaymentConflict(
                "event_id %r received twice with different data: %r vs %r" % (rec[0], prev[1:], rec[1:]))
        self._buf[rec[0]] = rec

    def close(self, error):
        try:
            if error is None and self._buf:
                self._write_with_retry()
            # on error: nothing committed for this partition-epoch; Spark replays it
        finally:
            self._buf = None
            self._close_conn()

    # -- internals ---------------------------------------------------------

    def _connect(self):
        name, mod = _driver()
        if name == "psycopg2":
            conn = mod.connect(self.dsn, connect_timeout=10)
            conn.autocommit = False
        else:
            conn = mod.connect(self.dsn, autocommit=False, connect_timeout=10)
        return conn

    def _write_with_retry(self):
        name, mod = _driver()
        attempt = 0
        while True:
            try:
                if self._conn is None:
                    self._conn = self._connect()
                self._write_once(self._conn)
                return
            except (PaymentConflict, InvalidPayment):
                self._rollback()
                raise
            except Exception as e:
                self._rollback()
                self._close_conn()
                attempt += 1
                if not _is_connection_error(e, mod) or attempt > self.retries:
                    raise
                # idempotent: re-running the whole partition-epoch is safe even if
                # the previous COMMIT actually reached the server
                _time.sleep(min(self.backoff_seconds * (2 ** (attempt - 1)), 15.0))

    def _write_once(self, conn):
        rows = [self._buf[k] for k in sorted(self._buf)]
        not_inserted = []
        with conn.cursor() as cur:
            for i in range(0, len(rows), _CHUNK):
                chunk = rows[i:i + _CHUNK]
                sql = self._head + ", ".join([self._tpl] * len(chunk)) + self._tail
                cur.execute(sql, [v for (eid, acc, amt) in chunk for v in (eid, acc, str(amt))])
                inserted = set(r[0] for r in cur.fetchall())
                not_inserted.extend(r for r in chunk if r[0] not in inserted)
            # payments that already existed must be the very same payment
            for i in range(0, len(not_inserted), _CHUNK):
                chunk = not_inserted[i:i + _CHUNK]
                cur.execute(self._check_sql, ([r[0] for r in chunk],))
                existing = dict((r[0], (r[1], r[2])) for r in cur.fetchall())
                for eid, acc, amt in chunk:
                    have = existing.get(eid)
                    if have is None:
                        raise PaymentConflict(
                            "event_id %r was neither inserted nor found in %s" % (eid, self.table))
                    if have[0] != acc or _decimal.Decimal(have[1]) != amt:
                        raise PaymentConflict(
                            "event_id %r already recorded as (%r, %s) but received (%r, %s)"
                            % (eid, have[0], have[1], acc, amt))
        conn.commit()

    def _rollback(self):
        if self._conn is not None:
            try:
                self._conn.rollback()
            except Exception:
                pass

    def _close_conn(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_conn"] = None
        state["_buf"] = None
        return state


def make_writer(dsn, table="payments"):
    return PaymentsWriter(dsn, table)
