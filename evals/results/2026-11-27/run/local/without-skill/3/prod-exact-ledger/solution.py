"""Exactly-once foreach writer for the append-only ledger ``payments``.

Table::

    payments(event_id text primary key, account text not null,
             amount numeric(18,2) not null)

Usage::

    (df.writeStream
       .outputMode("update")                       # required by real-time mode
       .foreach(PaymentsWriter(dsn, "payments"))
       .option("checkpointLocation", ...)
       .trigger(realTime="5 minutes")
       .start())

Why this is exactly-once
------------------------
Spark's foreach sink is at-least-once: after a failure the epoch is replayed,
possibly with a different task split, so ``(partition_id, epoch_id)`` cannot be
used as a dedup key.  The only stable key is the payment's own ``event_id``:

* every flush runs in ONE Postgres transaction::

      INSERT INTO payments SELECT * FROM unnest($ids, $accounts, $amounts)
      ORDER BY event_id
      ON CONFLICT (event_id) DO NOTHING RETURNING event_id

  so a payment is either fully committed or not at all (executor killed /
  Postgres restarted mid-epoch -> the open transaction is rolled back by the
  server; the task fails; Spark replays the epoch; the rows are inserted then);
* rows that already exist (replays, a commit whose acknowledgement was lost)
  are *not* silently skipped: in the same transaction, after the insert, the
  stored ``(account, amount)`` is read back and compared with the incoming
  one.  Identical -> it is the same payment, nothing to do.  Different ->
  :class:`PaymentConflictError` naming the event_ids, the transaction is
  rolled back and the task fails.  The ledger is append-only: never UPDATE;
* rows are only ever acknowledged to Spark by returning normally from
  ``close``; nothing is swallowed: validation errors, conflicts, and
  connection errors that persist after the bounded retry all propagate, so
  the query fails and the epoch is not committed to the checkpoint (-> no
  payment lost).

Original amount
---------------
``amount`` must be a ``Decimal`` (DecimalType) or ``int`` with at most 2
decimal places and |amount| < 10^16.  A value Postgres would *round* on the
way into numeric(18,2) (e.g. 10.005) is rejected instead of rounded.  A
``float`` is rejected (binary floats do not carry cents exactly); cast to
DecimalType(18,2) in Spark.

Transient failures
------------------
If the connection breaks (Postgres restart, failover, network) or the server
reports a serialization failure/deadlock, the flush is retried on a fresh
connection with backoff (default 6 attempts, ~1 minute).  This is safe because
the flush is idempotent and verified (see above); an unknown COMMIT outcome is
resolved by the retry itself.  After the last attempt the error is raised.

Zombie tasks (executor killed, TCP half-open) are cleaned up on the server by
``idle_in_transaction_session_timeout`` and TCP keepalives set for the
session, so a replay is not blocked forever by a dead task's row locks.

Latency
-------
Rows are flushed when ``flush_rows`` are buffered, when the oldest buffered row
is ``max_delay_s`` old (a daemon timer thread, needed in real-time mode where
``close`` only comes at the end of a long batch), and in ``close``.
"""

from __future__ import annotations

import decimal
import threading
import time

import psycopg
from psycopg import errors as pgerr
from psycopg import sql

MAX_ABS = decimal.Decimal("1e16")          # numeric(18,2): 16 integer digits
CENT = decimal.Decimal("0.01")
RETRYABLE_SQLSTATES = {"40001", "40P01", "57P01", "57P02", "57P03", "55P03"}


class PaymentValidationError(ValueError):
    pass


class PaymentConflictError(RuntimeError):
    """Same event_id arrived with a different account/amount than stored."""


def _table_identifier(table: str) -> sql.Composable:
    parts = [p for p in table.split(".") if p]
    if not parts or len(parts) > 2:
        raise ValueError(f"bad table name: {table!r}")
    return sql.Identifier(*parts)


def _get(row, name):
    try:
        return row[name]
    except (KeyError, IndexError, TypeError, ValueError):
        return getattr(row, name, None)


def normalize_amount(event_id, amount) -> decimal.Decimal:
    if amount is None:
        raise PaymentValidationError(f"payment {event_id!r}: amount is NULL")
    if isinstance(amount, bool) or isinstance(amount, float):
        raise PaymentValidationError(
            f"payment {event_id!r}: amount {amount!r} is a {type(amount).__name__}; "
            "send DecimalType(18,2) so cents are exact")
    if isinstance(amount, int):
        amount = decimal.Decimal(amount)
    if not isinstance(amount, decimal.Decimal):
        raise PaymentValidationError(
            f"payment {event_id!r}: unsupported amount type {type(amount).__name__}")
    if not amount.is_finite():
        raise PaymentValidationError(f"payment {event_id!r}: amount {amount} is not finite")
    if amount != amount.quantize(CENT, rounding=decimal.ROUND_DOWN):
        raise PaymentValidationError(
            f"payment {event_id!r}: amount {amount} has more than 2 decimals; "
            "numeric(18,2) would round it")
    if abs(amount) >= MAX_ABS:
        raise PaymentValidationError(
            f"payment {event_id!r}: amount {amount} does not fit numeric(18,2)")
    return amount


def _is_transient(exc: BaseException, conn) -> bool:
    if conn is None or conn.closed or conn.broken:
        return isinstance(exc, psycopg.OperationalError) or isinstance(exc, psycopg.InterfaceError)
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return sqlstate in RETRYABLE_SQLSTATES or sqlstate.startswith("08")


class PaymentsWriter:
    """Foreach writer (open/process/close) with idempotent, verified inserts."""

    def __init__(self, dsn: str, table: str = "payments", flush_rows: int = 1000,
                 max_delay_s: float = 0.1, retries: int = 6, backoff_s: float = 1.0,
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.flush_rows = max(1, int(flush_rows))
        self.max_delay_s = max_delay_s
        self.retries = max(1, int(retries))
        self.backoff_s = backoff_s
        self.connect_timeout = connect_timeout
        self._reset()

    def _reset(self):
        self._conn = None
        self._buf = {}
        self._first_ts = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._bg_error = None
        self._label = "payments-sink"

    def __getstate__(self):  # only settings travel to executors
        st = self.__dict__.copy()
        for k in ("_conn", "_first_ts", "_lock", "_stop", "_thread", "_bg_error"):
            st[k] = None
        st["_buf"] = {}
        return st

    # -- connection ----------------------------------------------------------
    def _connect(self):
        return psycopg.connect(
            self.dsn, autocommit=False, connect_timeout=self.connect_timeout,
            application_name=self._label,
            keepalives=1, keepalives_idle=30, keepalives_interval=10, keepalives_count=3,
            options=("-c idle_in_transaction_session_timeout=60000 "
                     "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 "
                     "-c tcp_keepalives_count=3"),
        )

    # -- foreach protocol ----------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        self._reset()
        self._label = f"payments-sink p{partition_id} e{epoch_id}"
        t = _table_identifier(self.table)
        self._insert_sql = sql.SQL(
            "INSERT INTO {t} (event_id, account, amount) "
            "SELECT e, a, m FROM unnest(%s::text[], %s::text[], %s::numeric[]) AS u(e, a, m) "
            "ORDER BY e "
            "ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
        ).format(t=t)
        self._check_sql = sql.SQL(
            "SELECT event_id, account, amount FROM {t} WHERE event_id = ANY(%s::text[])"
        ).format(t=t)
        self._conn = self._connect()   # fail fast; nothing to clean up if it raises
        self._lock = threading.Lock()
        if self.max_delay_s and self.max_delay_s > 0:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._timer, daemon=True,
                                            name="payments-sink-flusher")
            self._thread.start()
        return True

    def process(self, row) -> None:
        if self._bg_error is not None:
            raise self._bg_error
        event_id = _get(row, "event_id")
        account = _get(row, "account")
        if event_id is None:
            raise PaymentValidationError(f"payment with NULL event_id: {row!r}")
        if account is None:
            raise PaymentValidationError(f"payment {event_id!r}: account is NULL")
        amount = normalize_amount(event_id, _get(row, "amount"))
        with self._lock:
            prev = self._buf.get(event_id)
            if prev is not None:
                if prev != (account, amount):
                    raise PaymentConflictError(
                        f"payment {event_id!r} appears twice in this epoch with different "
                        f"values: {prev!r} vs {(account, amount)!r}")
                return  # exact duplicate within the epoch: same payment
            self._buf[event_id] = (account, amount)
            if self._first_ts is None:
                self._first_ts = time.monotonic()
            if len(self._buf) >= self.flush_rows:
                self._flush_locked()

    def close(self, error) -> None:
        try:
            if self._stop is not None:
                self._stop.set()
                self._thread.join(timeout=300)
            if error is None and self._conn is not None:
                if self._bg_error is not None:
                    raise self._bg_error
                with self._lock:
                    self._flush_locked()
            # On error: drop the buffer WITHOUT writing; the task fails, the
            # epoch is not committed, Spark replays it -> nothing is lost.
        finally:
            conn, self._conn = self._conn, None
            self._buf = {}
            if conn is not None:
                try:
                    if not conn.broken and not conn.closed:
                        conn.rollback()
                except Exception:
                    pass
                conn.close()

    # -- internals -----------------------------------------------------------
    def _timer(self):
        tick = min(self.max_delay_s, 0.05)
        while not self._stop.wait(tick):
            try:
                with self._lock:
                    if (self._first_ts is not None
                            and time.monotonic() - self._first_ts >= self.max_delay_s):
                        self._flush_locked()
            except BaseException as exc:
                self._bg_error = exc   # re-raised by process()/close()
                return

    def _flush_locked(self) -> None:
        if not self._buf:
            self._first_ts = None
            return
        ids = list(self._buf.keys())
        accounts = [self._buf[i][0] for i in ids]
        amounts = [self._buf[i][1] for i in ids]
        attempt = 0
        while True:
            attempt += 1
            try:
                if self._conn is None or self._conn.closed or self._conn.broken:
                    if self._conn is not None:
                        self._conn.close()
                    self._conn = self._connect()
                self._write_verified(ids, accounts, amounts)
                break
            except (PaymentConflictError, PaymentValidationError):
                raise
            except psycopg.Error as exc:
                conn = self._conn
                if conn is not None and not conn.closed and not conn.broken:
                    try:
                        conn.rollback()
                    except Exception:
                        pass
                if attempt >= self.retries or not _is_transient(exc, conn):
                    raise
                time.sleep(min(self.backoff_s * (2 ** (attempt - 1)), 30.0))
        self._buf = {}
        self._first_ts = None

    def _write_verified(self, ids, accounts, amounts) -> None:
        conn = self._conn
        with conn.cursor() as cur:
            cur.execute(self._insert_sql, (ids, accounts, amounts))
            inserted = {r[0] for r in cur.fetchall()}
            existing = [i for i in ids if i not in inserted]
            if existing:
                # New statement -> new snapshot (READ COMMITTED): sees rows
                # committed by any concurrent/zombie task we waited for.
                cur.execute(self._check_sql, (existing,))
                stored = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
                bad = []
                for i in existing:
                    want = self._buf[i]
                    got = stored.get(i)
                    if got is None or got[0] != want[0] or got[1] != want[1]:
                        bad.append((i, got, want))
                if bad:
                    conn.rollback()
                    shown = "; ".join(
                        f"{i!r}: stored={g!r} incoming={w!r}" for i, g, w in bad[:20])
                    raise PaymentConflictError(
                        f"{len(bad)} payment(s) already in the ledger with different "
                        f"values (ledger is append-only, nothing written from this "
                        f"flush): {shown}")
        conn.commit()


__all__ = ["PaymentsWriter", "PaymentConflictError", "PaymentValidationError",
           "normalize_amount"]
