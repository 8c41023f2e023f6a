"""Exactly-once foreach writer for the append-only ledger ``payments``.

    (df.writeStream
       .foreach(PaymentsWriter(dsn, "payments"))
       .option("checkpointLocation", ckpt)
       .trigger(realTime="5 minutes")
       .start())

Why this is exactly-once (effectively-once) under every failure in the brief
---------------------------------------------------------------------------
Spark's foreach sink is at-least-once: after a failure the epoch is replayed,
possibly split into tasks differently.  So the *key* of idempotence must be
the payment itself -- ``event_id`` -- never ``(partition_id, epoch_id)``
(a different split would then write a payment twice or skip it).

Each chunk of rows is written in ONE transaction:

1. ``COPY`` the rows (binary) into a session temp table ``_payments_stage``
   whose ``amount`` column is *unconstrained* numeric (the original value);
2. ``INSERT INTO payments SELECT ... FROM stage ON CONFLICT (event_id) DO
   NOTHING`` -- a payment already in the ledger (from a replay, a zombie task
   of a killed executor, a commit whose acknowledgement was lost) is not
   inserted again;
3. a *separate* statement (fresh READ COMMITTED snapshot, so it also sees rows
   committed by a concurrent task we just waited for) compares every staged
   row with what the ledger holds for its event_id.  Any difference -- the
   same event_id arriving with another account or amount, two different
   versions of one event_id in the input, or an amount that numeric(18,2)
   would have rounded (1.005 -> 1.01) -- raises :class:`LedgerConflict`, the
   transaction is rolled back, and the task/query fails.  Nothing is
   "resolved" silently: the original amount is either stored exactly or the
   query stops with the event_id named.
4. ``COMMIT`` with ``synchronous_commit = on`` forced for the session, so an
   acknowledged commit survives a Postgres crash/restart (a role or database
   default of ``off`` could otherwise lose payments that Spark already
   considers committed).

Failure cases
-------------
* Replay after failure / different split: step 2 makes re-inserts no-ops,
  step 3 proves they are the same payment.
* Executor killed mid-task: its open transaction dies with its connection
  (server rolls back); already committed chunks are skipped on replay.  A
  zombie connection that still holds row locks only makes the replay wait.
  TCP keepalives and ``idle_in_transaction_session_timeout`` bound how long an
  orphaned session can hold locks.
* Postgres restarts mid-epoch (or failover): connection-class errors
  (``OperationalError``: admin shutdown 57P01, cannot-connect-now 57P03,
  connection failures 08xxx) and serialization/deadlock (40001/40P01) are
  retried for the whole chunk on a NEW connection with backoff, for at most
  ``retry_seconds``.  Retrying is safe even if the COMMIT actually succeeded
  before the connection broke (outcome unknown), thanks to steps 2-3.  When
  the retry budget is exhausted the original error is raised, failing the
  task, so Spark retries/fails the query -- never a silent skip.
* Every other error (NOT NULL, numeric overflow, LedgerConflict, bad input)
  is raised at once.  ``close(error)`` rolls back and closes; an error during
  the final flush in ``close(None)`` is raised.

All rows of a task are durable before ``close()`` returns, and Spark only
commits the epoch after all tasks' ``close()`` succeeded.
"""

from __future__ import annotations

import random
import time
from decimal import Decimal, InvalidOperation
from typing import Any, List, Optional

_CENT = Decimal("0.01")


class LedgerConflict(RuntimeError):
    """A payment's event_id exists with different data, or would be altered."""


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, TypeError, IndexError):
        return getattr(row, name, None)


def _has_more_than_2_decimals(d: Decimal) -> bool:
    # exact check on the digits (no context rounding, works for 38-digit values)
    _sign, digits, exp = d.as_tuple()
    extra = -2 - exp
    return extra > 0 and any(digits[-extra:])


def _to_decimal(event_id: Any, v: Any) -> Optional[Decimal]:
    if v is None or isinstance(v, Decimal):
        d = v
    elif isinstance(v, bool):
        raise LedgerConflict("payment event_id=%r: amount is a boolean" % (event_id,))
    elif isinstance(v, int):
        d = Decimal(v)
    elif isinstance(v, float):
        d = Decimal(repr(v))  # shortest repr = the value as printed, not the binary expansion
    else:
        try:
            d = Decimal(str(v))
        except InvalidOperation:
            raise LedgerConflict("payment event_id=%r: amount %r is not a number" % (event_id, v))
    if d is not None and not d.is_finite():
        raise LedgerConflict("payment event_id=%r: amount %r is not finite" % (event_id, v))
    if d is not None and _has_more_than_2_decimals(d):
        raise LedgerConflict(
            "payment event_id=%r: amount %s has more than 2 decimals; numeric(18,2) "
            "would round it, refusing to change the original amount" % (event_id, d))
    return d


class PaymentsWriter:
    """Spark foreach writer (open/process/close) for an append-only ledger."""

    RETRYABLE_SQLSTATES = ("40001", "40P01", "57P01", "57P02", "57P03", "53300")

    def __init__(self, dsn: str, table: str = "payments", chunk_rows: int = 1000,
                 max_delay_s: float = 0.05, retry_seconds: float = 120.0,
                 connect_timeout: int = 10):
        self.dsn = dsn
        self.table = table
        self.chunk_rows = max(1, int(chunk_rows))
        self.max_delay_s = max_delay_s
        self.retry_seconds = retry_seconds
        self.connect_timeout = connect_timeout
        self._conn = None
        self._stage_ready = False
        self._buf: List[tuple] = []
        self._first_ts: Optional[float] = None

    def __getstate__(self):
        st = self.__dict__.copy()
        st.update(_conn=None, _stage_ready=False, _buf=[], _first_ts=None)
        return st

    # ---- foreach protocol -------------------------------------------------
    def open(self, partition_id, epoch_id) -> bool:
        self._conn = None          # connect lazily; open() must not leak
        self._stage_ready = False
        self._buf = []
        self._first_ts = None
        return True

    def process(self, row) -> None:
        event_id = _get(row, "event_id")
        item = (event_id, _get(row, "account"), _to_decimal(event_id, _get(row, "amount")))
        if not self._buf:
            self._first_ts = time.monotonic()
        self._buf.append(item)
        if (len(self._buf) >= self.chunk_rows
                or time.monotonic() - self._first_ts >= self.max_delay_s):
            self._flush()

    def close(self, error) -> None:
        try:
            if error is None:
                self._flush()
            elif self._conn is not None and not self._conn.closed:
                try:
                    self._conn.rollback()
                except Exception:
                    pass
        finally:
            self._drop_connection()
            self._buf = []

    # ---- internals -----------------------------------------------------------
    def _drop_connection(self):
        conn, self._conn = self._conn, None
        self._stage_ready = False
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _connection(self):
        import psycopg

        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop_connection()
            self._conn = psycopg.connect(
                self.dsn, autocommit=False, connect_timeout=self.connect_timeout,
                keepalives=1, keepalives_idle=30, keepalives_interval=10,
                keepalives_count=3,
                options="-c synchronous_commit=on "
                        "-c idle_in_transaction_session_timeout=60000")
        if not self._stage_ready:
            self._conn.execute(
                "CREATE TEMP TABLE IF NOT EXISTS _payments_stage "
                "(event_id text, account text, amount numeric) ON COMMIT DELETE ROWS")
            self._conn.commit()
            self._stage_ready = True
        return self._conn

    def _is_retryable(self, exc) -> bool:
        import psycopg

        if isinstance(exc, LedgerConflict):
            return False
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if sqlstate in self.RETRYABLE_SQLSTATES or sqlstate.startswith("08"):
            return True
        # connection lost (no SQLSTATE) / server went away
        return isinstance(exc, psycopg.OperationalError) and (
            self._conn is None or self._conn.broken or self._conn.closed or not sqlstate)

    def _flush(self) -> None:
        if not self._buf:
            return
        import psycopg

        buf = self._buf
        deadline = time.monotonic() + self.retry_seconds
        attempt = 0
        while True:
            attempt += 1
            try:
                self._write_chunk(buf)
                break
            except (psycopg.Error, OSError) as exc:
                retry = self._is_retryable(exc)
                if self._conn is not None and not self._conn.closed:
                    try:
                        self._conn.rollback()
                    except Exception:
                        pass
                if not retry or time.monotonic() >= deadline:
                    raise
                self._drop_connection()
                time.sleep(min(5.0, 0.2 * 2 ** min(attempt, 5)) * (0.5 + random.random()))
        self._buf = []
        self._first_ts = None

    def _write_chunk(self, buf: List[tuple]) -> None:
        from psycopg import sql

        conn = self._connection()
        t = sql.Identifier(*self.table.split("."))
        with conn.cursor() as cur:
            with cur.copy("COPY _payments_stage (event_id, account, amount) "
                          "FROM STDIN (FORMAT BINARY)") as cp:
                cp.set_types(["text", "text", "numeric"])
                for r in buf:
                    cp.write_row(r)
            cur.execute(sql.SQL(
                "INSERT INTO {t} (event_id, account, amount) "
                "SELECT event_id, account, amount FROM _payments_stage "
                "ON CONFLICT (event_id) DO NOTHING").format(t=t))
            # fresh snapshot: compare every staged payment with the ledger
            cur.execute(sql.SQL(
                "SELECT s.event_id, s.account, s.amount::text, p.account, p.amount::text "
                "FROM _payments_stage s LEFT JOIN {t} p USING (event_id) "
                "WHERE p.event_id IS NULL "
                "   OR p.account IS DISTINCT FROM s.account "
                "   OR p.amount IS DISTINCT FROM s.amount "
                "LIMIT 20").format(t=t))
            bad = cur.fetchall()
        if bad:
            conn.rollback()
            details = "; ".join(
                "event_id=%r incoming (account=%r, amount=%s) vs ledger (account=%r, amount=%s)"
                % b for b in bad)
            raise LedgerConflict(
                "payments ledger conflict, chunk rolled back (first %d): %s" % (len(bad), details))
        conn.commit()
