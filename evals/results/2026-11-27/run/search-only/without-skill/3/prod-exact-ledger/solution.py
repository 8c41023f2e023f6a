"""Exactly-once foreach writer for the append-only ledger ``payments``.

    query = (df.writeStream
               .foreach(PaymentsWriter(dsn, "payments"))
               .outputMode("update")
               .trigger(realTime="5 minutes")
               .option("checkpointLocation", ckpt)
               .start())

Why every payment lands exactly once, with its original amount:

* Spark's guarantee is at-least-once delivery to a foreach sink: after a
  failure (executor killed mid-task, task failure, query restart) the epoch
  is replayed from the last committed offsets, possibly with a different
  split of rows over tasks.  So the writer is made idempotent on the natural
  key ``event_id`` instead of relying on (partition, epoch) bookkeeping,
  which breaks when a replay re-partitions the rows.
* Each payment is written in its own autocommit statement::

      WITH ins AS (INSERT INTO payments (event_id, account, amount)
                   VALUES (...) ON CONFLICT (event_id) DO NOTHING
                   RETURNING 1)
      SELECT (SELECT count(*) FROM ins), p.account, p.amount
      FROM payments p WHERE p.event_id = ...

  A first delivery inserts; a replay finds the row and *verifies* that the
  stored account and amount are identical to the replayed ones.  A
  different amount/account under the same event_id is never silently
  ignored: it raises ``LedgerConflictError``.
* The amount is passed as an exact ``Decimal`` (never float).  Because the
  column is numeric(18,2), Postgres would silently round an amount with
  more than 2 decimals; the writer refuses such a value with an error
  instead of storing a different amount.  NULL account/amount, overflow,
  etc. are rejected by Postgres and raised.
* A committed row is durable; a row whose commit was lost (executor killed,
  Postgres restart) is simply re-inserted on replay -- the insert either
  happened or it did not, and the replay converges to exactly one row.
* Postgres restart / dropped connection mid-epoch: the writer reconnects
  and re-runs the same idempotent statement (with backoff, bounded by
  ``retry_seconds``; a warning is printed to the executor's stderr).  If
  Postgres does not come back in time the error is raised and the task
  fails; Spark replays the epoch later and idempotency keeps it exact.
  Only broken-connection errors are retried; every data error is raised
  immediately.

Works with psycopg2 (preferred when installed) or psycopg 3.
"""

import sys
import time
from decimal import Decimal

_CENT = Decimal("0.01")


class LedgerConflictError(RuntimeError):
    pass


def _quote_ident(name):
    parts = name.split(".")
    return ".".join('"' + p.strip('"').replace('"', '""') + '"' for p in parts)


def _driver():
    try:
        import psycopg2 as m  # type: ignore

        return 2, m
    except ImportError:
        import psycopg as m  # type: ignore

        return 3, m


def _is_broken(kind, conn):
    if conn is None:
        return True
    try:
        if kind == 2:
            return conn.closed != 0
        return bool(conn.closed or getattr(conn, "broken", False))
    except Exception:
        return True


def _exact_amount(value, event_id):
    if value is None:
        return None  # NOT NULL constraint in Postgres will raise
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, float):
        d = Decimal(repr(value))  # shortest exact decimal of the double
    else:
        d = Decimal(str(value))
    if not d.is_finite():
        raise ValueError("payment event_id=%r has non-finite amount %r" % (event_id, value))
    if d != d.quantize(_CENT):
        raise ValueError(
            "payment event_id=%r amount %s has more than 2 decimals; numeric(18,2) "
            "would round it, refusing to store a different amount" % (event_id, d)
        )
    return d


class PaymentsWriter:
    """PySpark ForeachWriter-style object (open / process / close)."""

    def __init__(self, dsn, table="payments", retry_seconds=120.0):
        self.dsn = dsn
        self.table = table
        self.retry_seconds = float(retry_seconds)
        self._conn = None
        t = _quote_ident(table)
        self._sql = (
            "WITH ins AS (INSERT INTO %s (\"event_id\", \"account\", \"amount\") "
            "VALUES (%%s, %%s, %%s::numeric) ON CONFLICT (\"event_id\") DO NOTHING "
            "RETURNING 1) "
            "SELECT (SELECT count(*) FROM ins), p.\"account\", p.\"amount\" "
            "FROM (SELECT 1) one LEFT JOIN %s p ON p.\"event_id\" = %%s" % (t, t)
        )
        self._lookup = "SELECT \"account\", \"amount\" FROM %s WHERE \"event_id\" = %%s" % t

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_conn"] = None
        return st

    # -- connection handling -------------------------------------------------
    def _connect(self):
        kind, m = _driver()
        if kind == 2:
            conn = m.connect(self.dsn)
            conn.autocommit = True
        else:
            conn = m.connect(self.dsn, autocommit=True)
        self._kind, self._mod, self._conn = kind, m, conn

    def _close_conn(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
        self._conn = None

    def _run(self, fn):
        """Run fn(cursor); reconnect + retry only when the connection broke."""
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.25
        while True:
            try:
                if self._conn is None or _is_broken(self._kind, self._conn):
                    self._close_conn()
                    self._connect()
                cur = self._conn.cursor()
                try:
                    return fn(cur)
                finally:
                    try:
                        cur.close()
                    except Exception:
                        pass
            except (self._mod.OperationalError, self._mod.InterfaceError) as exc:
                if not _is_broken(self._kind, self._conn):
                    raise  # a real database error on a live connection
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        "payments sink: Postgres unreachable for %.0fs, failing task "
                        "(epoch will be replayed idempotently): %s" % (self.retry_seconds, exc)
                    ) from exc
                sys.stderr.write(
                    "payments sink: connection lost (%s); reconnecting in %.2fs\n"
                    % (str(exc).strip(), delay)
                )
                self._close_conn()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- ForeachWriter protocol -------------------------------------------
    def open(self, partition_id, epoch_id):
        self.partition_id = partition_id
        self.epoch_id = epoch_id
        self._kind, self._mod = _driver()
        self._conn = None
        self._run(lambda cur: None)  # connect (with retry)
        return True

    def process(self, row):
        event_id = row["event_id"]
        account = row["account"]
        amount = _exact_amount(row["amount"], event_id)

        def write(cur):
            cur.execute(self._sql, (event_id, account, amount, event_id))
            res = cur.fetchone()
            inserted = res[0]
            cur_account, cur_amount = res[1], res[2]
            if inserted == 0 and cur_amount is None and cur_account is None:
                # Row committed concurrently after our snapshot: read it now.
                cur.execute(self._lookup, (event_id,))
                r = cur.fetchone()
                if r is None:
                    raise RuntimeError("payment event_id=%r neither inserted nor found" % (event_id,))
                cur_account, cur_amount = r
            return inserted, cur_account, cur_amount

        inserted, cur_account, cur_amount = self._run(write)
        if inserted == 0 and (cur_account != account or Decimal(cur_amount) != amount):
            raise LedgerConflictError(
                "payment event_id=%r already in ledger as (account=%r, amount=%s) "
                "but replay/duplicate carries (account=%r, amount=%s)"
                % (event_id, cur_account, cur_amount, account, amount)
            )

    def close(self, error):
        self._close_conn()
        # If ``error`` is set PySpark re-raises it after close(): the task
        # fails visibly and the epoch is replayed (idempotently).
