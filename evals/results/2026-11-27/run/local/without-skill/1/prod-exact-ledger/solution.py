"""Exactly-once foreach writer for the append-only ledger ``payments``.

Table: payments(event_id text primary key, account text not null,
                amount numeric(18,2) not null)

Spark's foreach sink is at-least-once: an epoch can be replayed after a
failure, with rows split across tasks differently; a killed executor leaves a
half-done task; Postgres may restart mid-epoch. Exactly-once therefore comes
from the *data*, not from epoch/partition bookkeeping:

* The key is ``event_id`` (the payment's own identity), never
  (epoch, partition) - so a replay that repartitions rows still dedupes.
* Rows are inserted with ``INSERT ... ON CONFLICT (event_id) DO NOTHING
  RETURNING event_id`` inside a transaction. For every row that was *not*
  inserted (already present: a replay, a retry after an unknown commit outcome,
  a concurrent zombie task), the stored row is read back in the same
  transaction and compared with the incoming one. Identical -> it is the same
  payment, skip. Different account or amount -> ``PaymentConflictError``
  naming the event_ids: never overwritten (append-only), never ignored.
* Amounts are ``decimal.Decimal`` end to end (no float). A value with more than
  2 decimal places or more than 16 integer digits would be rounded / rejected
  by numeric(18,2); the writer refuses it up front (``InvalidPaymentError``)
  instead of letting Postgres silently round it. NULL event_id / account /
  amount are rejected the same way, naming the row.
* Each flush is one transaction: either all of its rows are committed or none.
  A killed executor therefore leaves only whole, committed batches; the replay
  inserts the rest and skips (after verifying) what is already there.
* Postgres restart / connection loss (``psycopg.OperationalError``, incl.
  admin_shutdown 57P01, cannot_connect_now 57P03, lost connection during
  COMMIT): the batch is retried on a fresh connection with backoff (default up
  to ~60 s). That is safe even when the COMMIT outcome is unknown because the
  retry is idempotent and verified. If Postgres is still not back, the error
  is raised: the task fails, Spark retries it or fails the query - nothing is
  swallowed.
* ``close(error)``: with an error the unflushed buffer is dropped (those rows
  were not committed, so the replay re-delivers them) and nothing is hidden;
  without an error the buffer is flushed and any failure is raised, so Spark
  never commits an epoch whose rows are not durably in Postgres.

Latency/throughput: rows are buffered and flushed as one statement per batch
(``unnest`` of three arrays, one round trip + one verification query only when
something already existed) when ``batch_size`` rows are buffered, when the
oldest row is older than ``linger_ms`` (checked on each row and by a timer
thread, so real-time mode does not wait for the end of a long epoch) and at
``close``.
"""

from __future__ import annotations

import decimal
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import psycopg
from psycopg import sql

_MAX_AMOUNT = decimal.Decimal("9999999999999999.99")  # numeric(18,2)


class InvalidPaymentError(ValueError):
    pass


class PaymentConflictError(RuntimeError):
    pass


def _get(row: Any, name: str) -> Any:
    if isinstance(row, dict):
        return row.get(name)
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        return getattr(row, name, None)


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*[p.strip('"') for p in table.split(".")])


def _exact_amount(event_id: Any, v: Any) -> decimal.Decimal:
    if v is None:
        raise InvalidPaymentError(f"payment {event_id!r}: amount is NULL")
    if isinstance(v, bool):
        raise InvalidPaymentError(f"payment {event_id!r}: amount is a boolean {v!r}")
    if isinstance(v, decimal.Decimal):
        d = v
    elif isinstance(v, int):
        d = decimal.Decimal(v)
    elif isinstance(v, str):
        try:
            d = decimal.Decimal(v)
        except decimal.InvalidOperation:
            raise InvalidPaymentError(f"payment {event_id!r}: amount {v!r} is not a number") from None
    else:
        raise InvalidPaymentError(
            f"payment {event_id!r}: amount must be Decimal (DecimalType), got "
            f"{type(v).__name__} {v!r}; a float cannot carry an exact amount")
    if not d.is_finite():
        raise InvalidPaymentError(f"payment {event_id!r}: amount {d} is not finite")
    if d != d.quantize(decimal.Decimal("0.01"), context=decimal.Context(prec=60)):
        raise InvalidPaymentError(
            f"payment {event_id!r}: amount {d} has more than 2 decimal places; "
            f"numeric(18,2) would round it - refusing")
    if abs(d) > _MAX_AMOUNT:
        raise InvalidPaymentError(f"payment {event_id!r}: amount {d} exceeds numeric(18,2)")
    return d


class PaymentsWriter:
    """``df.writeStream.foreach(PaymentsWriter(dsn, "payments"))``"""

    def __init__(self, dsn: str, table: str = "payments", batch_size: int = 2000,
                 linger_ms: float = 100.0, retry_seconds: float = 60.0,
                 background_flush: bool = True):
        self.dsn = dsn
        self.table = table
        self.batch_size = int(batch_size)
        self.linger_s = float(linger_ms) / 1000.0
        self.retry_seconds = float(retry_seconds)
        self.background_flush = background_flush
        self._reset_runtime()

    _CONFIG = ("dsn", "table", "batch_size", "linger_s", "retry_seconds", "background_flush")

    def __getstate__(self):
        return {k: self.__dict__[k] for k in self._CONFIG}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: Optional[psycopg.Connection] = None
        self._buf: Dict[str, Tuple[str, decimal.Decimal]] = {}
        self._first_ts: Optional[float] = None
        self._lock = threading.Lock()
        self._stop: Optional[threading.Event] = None
        self._timer: Optional[threading.Thread] = None
        self._bg_error: Optional[BaseException] = None
        self.inserted = 0
        self.already_present = 0

    # ------------------------------------------------------------------ SQL
    def _insert_sql(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {t} (event_id, account, amount) "
            "SELECT e, a, m FROM unnest(%s::text[], %s::text[], %s::numeric[]) AS u(e, a, m) "
            "ORDER BY e "
            "ON CONFLICT (event_id) DO NOTHING RETURNING event_id"
        ).format(t=_table_ident(self.table))

    def _existing_sql(self) -> sql.Composed:
        return sql.SQL(
            "SELECT event_id, account, amount FROM {t} WHERE event_id = ANY(%s::text[])"
        ).format(t=_table_ident(self.table))

    # ------------------------------------------------------------ lifecycle
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._reset_runtime()
        self._partition_id, self._epoch_id = partition_id, epoch_id
        # connect lazily in the first flush (retrying connect is part of the flush)
        if self.background_flush and self.linger_s > 0:
            self._stop = threading.Event()
            self._timer = threading.Thread(target=self._timer_loop, daemon=True,
                                           name="payments-sink-flusher")
            self._timer.start()
        return True

    def process(self, row: Any) -> None:
        if self._bg_error is not None:
            raise self._bg_error
        event_id = _get(row, "event_id")
        account = _get(row, "account")
        if event_id is None:
            raise InvalidPaymentError(f"payment with NULL event_id (account={account!r})")
        if not isinstance(event_id, str):
            event_id = str(event_id)
        if account is None:
            raise InvalidPaymentError(f"payment {event_id!r}: account is NULL")
        amount = _exact_amount(event_id, _get(row, "amount"))
        with self._lock:
            prev = self._buf.get(event_id)
            if prev is not None:
                if prev != (account, amount):
                    raise PaymentConflictError(
                        f"payment {event_id!r} delivered twice with different data: "
                        f"{prev!r} vs {(account, amount)!r}")
                return  # exact duplicate inside the same task: one payment
            self._buf[event_id] = (account, amount)
            if self._first_ts is None:
                self._first_ts = time.monotonic()
            if (len(self._buf) >= self.batch_size
                    or (self.linger_s > 0 and time.monotonic() - self._first_ts >= self.linger_s)):
                self._flush_locked()

    def close(self, error: Optional[BaseException]) -> None:
        try:
            self._stop_timer()
            if error is None:
                if self._bg_error is not None:
                    raise self._bg_error
                with self._lock:
                    self._flush_locked()
        finally:
            self._buf = {}
            self._drop_connection()

    # -------------------------------------------------------------- flushing
    def _connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._drop_connection()
            self._conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=10,
                                         application_name="payments-foreach-sink")
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _flush_locked(self) -> None:
        if not self._buf:
            self._first_ts = None
            return
        batch = self._buf
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.2
        while True:
            try:
                self._write_batch(batch)
                break
            except psycopg.OperationalError:
                # connection lost / server restarting / commit outcome unknown:
                # the batch is idempotent and verified, so retry it on a new connection
                self._drop_connection()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)
            except BaseException:
                # data errors, conflicts, constraint violations: roll back and raise
                if self._conn is not None and not self._conn.closed:
                    try:
                        self._conn.rollback()
                    except Exception:
                        self._drop_connection()
                raise
        self._buf = {}
        self._first_ts = None

    def _write_batch(self, batch: Dict[str, Tuple[str, decimal.Decimal]]) -> None:
        conn = self._connect()
        ids = list(batch.keys())
        accounts = [batch[i][0] for i in ids]
        amounts = [batch[i][1] for i in ids]
        with conn.transaction():
            with conn.cursor() as cur:
                cur.execute(self._insert_sql(), (ids, accounts, amounts))
                inserted = {r[0] for r in cur.fetchall()}
                missing = [i for i in ids if i not in inserted]
                if missing:
                    cur.execute(self._existing_sql(), (missing,))
                    stored = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
                    bad = []
                    for i in missing:
                        s = stored.get(i)
                        if s is None or s[0] != batch[i][0] or s[1] != batch[i][1]:
                            bad.append((i, batch[i], s))
                    if bad:
                        shown = "; ".join(
                            f"{i!r}: incoming {inc!r} stored {st!r}" for i, inc, st in bad[:20])
                        raise PaymentConflictError(
                            f"{len(bad)} payment(s) already in {self.table} with different "
                            f"data (append-only ledger, not overwritten): {shown}")
        self.inserted += len(inserted)
        self.already_present += len(ids) - len(inserted)

    # ------------------------------------------------------------- timer
    def _timer_loop(self) -> None:
        stop = self._stop
        interval = max(self.linger_s / 2.0, 0.005)
        while not stop.wait(interval):
            with self._lock:
                if self._bg_error is not None:
                    return
                if self._first_ts is None or time.monotonic() - self._first_ts < self.linger_s:
                    continue
                try:
                    self._flush_locked()
                except BaseException as e:  # surfaced by next process()/close()
                    self._bg_error = e
                    return

    def _stop_timer(self) -> None:
        if self._stop is not None:
            self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join()
        self._stop = self._timer = None


__all__ = ["PaymentsWriter", "PaymentConflictError", "InvalidPaymentError"]
