"""Exactly-once foreach writer for the append-only ledger ``payments``.

Table: payments(event_id text primary key, account text not null,
                amount numeric(18,2) not null)

Usage::

    (df.writeStream
       .foreach(PaymentsWriter(dsn, "payments"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")
       .start())

How "exactly once" is achieved
------------------------------
Spark's foreach sink is at-least-once: after a failure an epoch is replayed,
possibly with rows spread over tasks differently, so ``(partition_id,
epoch_id)`` cannot be used for deduplication.  The ledger's primary key
``event_id`` is the idempotency key instead:

* rows are inserted with ``INSERT ... ON CONFLICT (event_id) DO NOTHING
  RETURNING event_id`` -- a replayed payment is not inserted a second time,
  whichever task, epoch or attempt carries it, and concurrent tasks racing on
  the same id are serialized by the unique index;
* every row that was *not* inserted (already in the ledger) is compared with
  the stored row, in the same transaction; if account or amount differ the
  writer raises ``PaymentConflictError`` naming the event_id -- a conflicting
  duplicate is never hidden and the ledger row is never overwritten
  (append-only);
* amounts are converted to ``Decimal`` exactly (never through float) and must
  fit numeric(18,2) *without rounding*; a value with more than 2 decimals or
  more than 16 integer digits raises ``InvalidPaymentError`` instead of being
  silently rounded by Postgres.  NULL event_id/account/amount also raise;
* each batch is one transaction.  If the executor is killed mid-task, the open
  transaction is rolled back by Postgres and Spark replays the rows; batches
  already committed are simply skipped on replay;
* if Postgres restarts (or the connection drops) mid-epoch, the writer
  reconnects with back-off and re-sends the *same* batch (idempotent, also when
  the lost connection had in fact committed it).  If Postgres does not come back
  within ``RETRY_SECONDS`` the error is raised, the task fails and Spark
  retries/fails the query -- nothing is swallowed.
* rows are buffered at most ``MAX_DELAY_SECONDS`` / ``BATCH_ROWS`` (a small
  background thread flushes quiet buffers, so in real-time mode payments land
  promptly) and always flushed before ``close`` returns; a flush failure in
  ``close`` is raised, so Spark never considers an epoch done with unwritten
  rows.
"""

import decimal
import threading
import time

BATCH_ROWS = 1000
MAX_DELAY_SECONDS = 0.2
RETRY_SECONDS = 120.0
_TICK = 0.05

_MAX_AMOUNT = decimal.Decimal("9999999999999999.99")  # numeric(18,2)
_CENT = decimal.Decimal("0.01")


class PaymentError(Exception):
    pass


class InvalidPaymentError(PaymentError, ValueError):
    """Row cannot be stored without changing it (NULLs, rounding, overflow)."""


class PaymentConflictError(PaymentError):
    """event_id already in the ledger with a different account/amount."""


def _quote_ident(name):
    return '"' + str(name).replace('"', '""') + '"'


def _quote_table(table):
    table = str(table).strip()
    if table.startswith('"'):
        return table
    return ".".join(_quote_ident(p) for p in table.split("."))


def _connect(dsn):
    try:
        import psycopg2

        conn = psycopg2.connect(dsn)
        conn.autocommit = False
        return conn
    except ImportError:
        import psycopg

        return psycopg.connect(dsn, autocommit=False)


def _retryable(exc):
    """Connection-level / transient errors worth re-sending the batch for."""
    code = getattr(exc, "pgcode", None) or getattr(exc, "sqlstate", None)
    if code is None and getattr(exc, "diag", None) is not None:
        code = getattr(exc.diag, "sqlstate", None)
    if code:
        # 08 connection exception, 57P0x shutdown/crash, 53 insufficient
        # resources, 40001 serialization failure, 40P01 deadlock
        return (code.startswith("08") or code.startswith("57P") or code.startswith("53")
                or code in ("40001", "40P01"))
    name = type(exc).__name__
    return name in ("OperationalError", "InterfaceError")


def _to_amount(value, event_id):
    if value is None:
        raise InvalidPaymentError("payment event_id=%r has NULL amount" % (event_id,))
    if isinstance(value, bool):
        raise InvalidPaymentError("payment event_id=%r has boolean amount" % (event_id,))
    if isinstance(value, decimal.Decimal):
        d = value
    elif isinstance(value, float):
        d = decimal.Decimal(repr(value))  # shortest repr, e.g. 12.34 -> Decimal('12.34')
    else:
        try:
            d = decimal.Decimal(str(value).strip())
        except decimal.InvalidOperation:
            raise InvalidPaymentError("payment event_id=%r has non-numeric amount %r" % (event_id, value))
    if not d.is_finite():
        raise InvalidPaymentError("payment event_id=%r has non-finite amount %r" % (event_id, value))
    q = d.quantize(_CENT, context=decimal.Context(prec=60))
    if q != d:
        raise InvalidPaymentError(
            "payment event_id=%r amount %s has more than 2 decimal places; "
            "numeric(18,2) would round it" % (event_id, d))
    if abs(q) > _MAX_AMOUNT:
        raise InvalidPaymentError(
            "payment event_id=%r amount %s does not fit numeric(18,2)" % (event_id, d))
    return q


class PaymentsWriter(object):
    """PySpark foreach writer. ``PaymentsWriter(dsn, table)`` is the writer object."""

    def __init__(self, dsn, table="payments"):
        self.dsn = dsn
        self.table = table
        self._reset()

    def _reset(self):
        self._conn = None
        self._buf = []
        self._first_ts = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._bg_error = None

    def __getstate__(self):
        return {"dsn": self.dsn, "table": self.table}

    def __setstate__(self, state):
        self.dsn = state["dsn"]
        self.table = state["table"]
        self._reset()

    # -- lifecycle -----------------------------------------------------------
    def open(self, partition_id, epoch_id):
        self._reset()
        self._conn = _connect(self.dsn)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ticker, name="payments-writer-flush")
        self._thread.daemon = True
        self._thread.start()
        return True

    def process(self, row):
        if hasattr(row, "asDict"):
            d = row.asDict()
        elif isinstance(row, dict):
            d = row
        else:
            d = dict(zip(("event_id", "account", "amount"), row))
        event_id = d.get("event_id")
        account = d.get("account")
        if event_id is None:
            raise InvalidPaymentError("payment without event_id: %r" % (d,))
        if account is None:
            raise InvalidPaymentError("payment event_id=%r has NULL account" % (event_id,))
        amount = _to_amount(d.get("amount"), event_id)
        with self._lock:
            self._raise_bg_error()
            self._buf.append((str(event_id), str(account), amount))
            if self._first_ts is None:
                self._first_ts = time.monotonic()
            if len(self._buf) >= BATCH_ROWS:
                self._flush_locked()

    def close(self, error):
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=RETRY_SECONDS + 30)
        pending = None
        try:
            if error is None and self._lock is not None:
                with self._lock:
                    self._raise_bg_error()
                    self._flush_locked()
        except Exception as e:  # noqa: BLE001
            pending = e
        finally:
            conn, self._conn = self._conn, None
            if conn is not None:
                try:
                    conn.rollback()  # no-op after commit; discards anything unfinished
                except Exception:
                    pass
                try:
                    conn.close()
                except Exception:
                    pass
            self._buf = []
        if pending is not None:
            raise pending  # never report an epoch as written when it is not

    # -- flushing ------------------------------------------------------------
    def _raise_bg_error(self):
        if self._bg_error is not None:
            err = self._bg_error
            raise err

    def _ticker(self):
        while not self._stop.wait(_TICK):
            with self._lock:
                if (self._bg_error is None and self._first_ts is not None
                        and time.monotonic() - self._first_ts >= MAX_DELAY_SECONDS):
                    try:
                        self._flush_locked()
                    except Exception as e:  # surfaced by the next process()/close()
                        self._bg_error = e
                        return

    def _flush_locked(self):
        if not self._buf:
            self._first_ts = None
            return
        batch = self._buf
        deadline = time.monotonic() + RETRY_SECONDS
        delay = 0.2
        while True:
            try:
                if self._conn is None or getattr(self._conn, "closed", False):
                    self._conn = _connect(self.dsn)
                self._write_batch(batch)
                break
            except PaymentError:
                self._rollback_quietly()
                raise
            except Exception as e:  # noqa: BLE001
                self._rollback_quietly()
                if not _retryable(e) or time.monotonic() + delay > deadline:
                    raise
                # connection lost / Postgres restarting: reconnect and re-send
                self._close_quietly()
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
        # only forget the rows once they are committed
        self._buf = []
        self._first_ts = None

    def _rollback_quietly(self):
        try:
            if self._conn is not None:
                self._conn.rollback()
        except Exception:
            pass

    def _close_quietly(self):
        try:
            if self._conn is not None:
                self._conn.close()
        except Exception:
            pass
        self._conn = None

    def _write_batch(self, batch):
        t = _quote_table(self.table)
        # sorted: concurrent tasks take the unique-index locks in the same order
        rows = sorted(batch, key=lambda r: r[0])
        conn = self._conn
        with conn.cursor() as cur:
            inserted = set()
            for i in range(0, len(rows), BATCH_ROWS):
                chunk = rows[i:i + BATCH_ROWS]
                sql = (
                    "INSERT INTO {t} (event_id, account, amount) VALUES {v} "
                    "ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
                ).format(t=t, v=", ".join(["(%s, %s, %s::numeric)"] * len(chunk)))
                params = []
                for ev, acc, amt in chunk:
                    params.extend((ev, acc, str(amt)))
                cur.execute(sql, params)
                inserted.update(r[0] for r in cur.fetchall())
            # every row that was not inserted now must already be in the ledger
            # with exactly the same content (replay) -- otherwise fail loudly
            expected = {}
            first_of = set()
            for ev, acc, amt in rows:
                if ev in inserted and ev not in first_of:
                    first_of.add(ev)  # this occurrence was the one inserted
                    continue
                expected.setdefault(ev, []).append((acc, amt))
            if expected:
                ids = sorted(expected)
                stored = {}
                for i in range(0, len(ids), BATCH_ROWS):
                    chunk = ids[i:i + BATCH_ROWS]
                    cur.execute(
                        "SELECT event_id, account, amount FROM {t} WHERE event_id IN ({p})".format(
                            t=t, p=", ".join(["%s"] * len(chunk))),
                        chunk,
                    )
                    for ev, acc, amt in cur.fetchall():
                        stored[ev] = (acc, decimal.Decimal(str(amt)))
                for ev, wanted in expected.items():
                    have = stored.get(ev)
                    if have is None:
                        raise PaymentError(
                            "payment event_id=%r was neither inserted nor found in %s" % (ev, self.table))
                    for acc, amt in wanted:
                        if have[0] != acc or have[1] != amt:
                            raise PaymentConflictError(
                                "payment event_id=%r already in %s as (account=%r, amount=%s) "
                                "but received (account=%r, amount=%s); refusing to overwrite "
                                "or drop it" % (ev, self.table, have[0], have[1], acc, amt))
        conn.commit()
