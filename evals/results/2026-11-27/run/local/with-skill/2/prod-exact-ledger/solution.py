"""Exactly-once foreach writer for the append-only ledger ``payments``.

    from solution import PaymentsWriter
    (payments.writeStream
       .foreach(PaymentsWriter("host=... dbname=... user=... sslmode=require", "payments"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/payments")
       .trigger(realTime="5 minutes")      # the checkpoint interval, not a latency
       .start())

Table: ``payments (event_id text primary key, account text not null,
amount numeric(18,2) not null)``.

Why every payment lands exactly once
------------------------------------
Spark's ``foreach`` delivery is at-least-once: after a task or executor failure, or
a restart from the checkpoint, the rows of the unfinished epoch (the whole long
batch in real-time mode) are delivered again, possibly split over tasks and
partitions differently.  So exactly-once must come from the table, keyed by the
payment's own identity, never from Spark's ``partition_id``/``epoch_id`` (those
change when the replay is split differently):

* Each flush is ONE transaction: ``INSERT ... SELECT FROM unnest(...) ON CONFLICT
  (event_id) DO NOTHING RETURNING event_id``.  A payment already in the ledger is
  never inserted twice and never overwritten: its stored amount stays the
  original one (append-only: no UPDATE is ever issued).
* A replayed payment is checked, not just skipped: for every ``event_id`` the
  insert did not add, the stored row is read back (in the same transaction) and
  compared with the incoming one.  Identical -> a harmless replay.  Different
  account or amount -> :class:`LedgerConflictError` naming the event and both
  values; nothing of that flush is committed.  A conflicting duplicate is never
  silently dropped.
* A killed executor or task: whatever the dead task committed stays; the replay
  re-sends it and it is skipped as identical; whatever it had not committed is
  inserted by the replay.  No loss, no duplicate.
* Postgres restarts / lost connections mid-epoch (SQLSTATE class 08, 57P01-03,
  no SQLSTATE), deadlocks and serialization failures are retried with backoff
  and a reconnect.  A connection lost *during COMMIT* leaves the outcome unknown;
  the retry is safe because the insert is idempotent and the verification proves
  the already-committed rows are identical.  When the retry budget runs out the
  task fails loudly; Spark retries the task / the query restarts from its
  checkpoint and the replay converges.
* No silent change of the amount: ``numeric(18,2)`` would *round* an amount with
  more than two decimals (``10.005`` -> ``10.01``) and Postgres does that
  silently.  The writer refuses such a value (and anything that does not fit
  16 integer digits, NaN, infinities, a null account/amount/event_id) with
  :class:`BadPaymentError` naming the event, before anything of the flush is
  written.  Floats are accepted only if their shortest decimal form has at most
  two decimals; use ``DecimalType`` upstream.
* No hidden errors: ``open()`` never returns ``False`` (Spark would skip the
  partition's rows); a failed flush is logged at ERROR at once and raised by the
  next ``process()`` or by ``close()``; ``close(error)`` with a task error
  discards unwritten rows so Spark replays them.
* Real-time mode: ``open()``/``close()`` run once per long batch, so rows are
  flushed from ``process()`` (``max_batch_rows``) and by a dwell timer
  (``max_dwell_ms``), not only in ``close()``.
* Keys are sent sorted, so tasks inserting overlapping ids wait rather than
  deadlock.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from decimal import Decimal, InvalidOperation
from typing import Any

import psycopg
from psycopg import sql

log = logging.getLogger("payments_sink")

_CENT = Decimal("0.01")
_LIMIT = Decimal(10) ** 16            # numeric(18,2): at most 16 digits before the point
_RETRY_SAME_CONN = {"40001", "40P01"}
_RECONNECT = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}


class SinkError(RuntimeError):
    """The ledger sink could not write; the task fails with this error."""


class BadPaymentError(SinkError, ValueError):
    """A payment that cannot be stored exactly as sent (names its event_id)."""


class LedgerConflictError(SinkError):
    """An event_id already in the ledger arrived again with a different account or amount."""


def _qualified(table: str) -> sql.Composable:
    parts = table.split(".")
    if len(parts) > 2 or any(not p for p in parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _exact_amount(event_id: str, value: Any) -> Decimal:
    if value is None:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount is null (the ledger requires it)")
    if isinstance(value, bool):
        raise BadPaymentError(f"payment event_id={event_id!r}: amount is a boolean")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} is not finite")
            amount = Decimal(repr(value))
        elif isinstance(value, (Decimal, int)):
            amount = Decimal(value)
        else:
            raise BadPaymentError(f"payment event_id={event_id!r}: amount has type {type(value).__name__}")
    except InvalidOperation:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} is not a number") from None
    if not amount.is_finite():
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} is not finite")
    if amount != amount.quantize(_CENT, rounding="ROUND_DOWN"):
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {amount} has more than 2 decimals; "
                              "numeric(18,2) would round it silently, so it is refused")
    if abs(amount) >= _LIMIT:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {amount} does not fit numeric(18,2)")
    return amount


def _check(row: Any) -> tuple[str, str, Decimal]:
    data = row.asDict() if hasattr(row, "asDict") else dict(row)
    for name in ("event_id", "account", "amount"):
        if name not in data:
            raise BadPaymentError(f"payment row has no field {name!r}: {sorted(data)}")
    event_id, account = data["event_id"], data["account"]
    if event_id is None:
        raise BadPaymentError(f"payment with a null event_id (account={account!r}, amount={data['amount']!r})")
    if not isinstance(event_id, str):
        raise BadPaymentError(f"payment event_id={event_id!r}: event_id must be a string")
    if account is None:
        raise BadPaymentError(f"payment event_id={event_id!r}: account is null (the ledger requires it)")
    if not isinstance(account, str):
        raise BadPaymentError(f"payment event_id={event_id!r}: account must be a string")
    for name, text in (("event_id", event_id), ("account", account)):
        if "\x00" in text:
            raise BadPaymentError(f"payment event_id={event_id!r}: {name} contains a NUL byte")
    return event_id, account, _exact_amount(event_id, data["amount"])


class _PaymentsForeachWriter:
    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 8) -> None:
        if not dsn or not table:
            raise ValueError("dsn and table are required")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        _qualified(table)
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self._reset_runtime()

    def _reset_runtime(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock = threading.RLock()
        self._buffer: dict[str, tuple[str, str, Decimal]] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._opened = False
        self.inserted = 0
        self.replayed = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def __repr__(self) -> str:
        return f"PaymentsWriter(table={self.table!r})"

    # -- SQL -----------------------------------------------------------------------------
    def _insert_sql(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {t} (event_id, account, amount) "
            "SELECT u.event_id, u.account, u.amount "
            "FROM unnest(%s::text[], %s::text[], %s::numeric[]) WITH ORDINALITY AS u(event_id, account, amount, n) "
            "ORDER BY u.n "
            "ON CONFLICT (event_id) DO NOTHING RETURNING event_id").format(t=_qualified(self.table))

    def _stored_sql(self) -> sql.Composed:
        return sql.SQL("SELECT event_id, account, amount FROM {t} WHERE event_id = ANY(%s::text[])").format(
            t=_qualified(self.table))

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> None:
        self._drop_conn()
        attempt = 0
        while True:
            try:
                self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="payments-ledger-sink",
                                             keepalives=1, keepalives_idle=30, keepalives_interval=10,
                                             keepalives_count=3)
                return
            except psycopg.OperationalError as exc:
                attempt += 1
                text = str(exc).lower()
                if attempt > self.max_retries or any(s in text for s in (
                        "authentication failed", "does not exist", "permission denied", "no pg_hba.conf")):
                    raise SinkError(f"cannot connect to Postgres for {self.table} "
                                    f"after {attempt} attempt(s): {str(exc).strip()}") from None
                self._sleep(attempt)

    def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    @staticmethod
    def _sleep(attempt: int) -> None:
        time.sleep(min(5.0, 0.25 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2))

    # -- one flush: one transaction (caller holds the lock) -----------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        ids = [r[0] for r in rows]
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(self._insert_sql(), (ids, [r[1] for r in rows], [r[2] for r in rows]))
                    inserted = {r[0] for r in cur.fetchall()}
                    already = [r for r in rows if r[0] not in inserted]
                    if already:
                        cur.execute(self._stored_sql(), ([r[0] for r in already],))
                        stored = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
                        for event_id, account, amount in already:
                            have = stored.get(event_id)
                            if have is None:   # cannot happen under a unique key; never guess
                                raise SinkError(f"payment event_id={event_id!r} was neither inserted nor found")
                            if have[0] != account or have[1] != amount:
                                raise LedgerConflictError(
                                    f"payment event_id={event_id!r} is already in {self.table} as "
                                    f"(account={have[0]!r}, amount={have[1]}) but arrived again as "
                                    f"(account={account!r}, amount={amount}); the ledger is append-only, "
                                    "nothing of this flush was written")
                self._conn.commit()
                self.inserted += len(inserted)
                self.replayed += len(rows) - len(inserted)
                break
            except SinkError:
                self._rollback()
                raise
            except psycopg.Error as exc:
                self._rollback()
                state = getattr(exc, "sqlstate", None)
                transient = (state in _RETRY_SAME_CONN or state in _RECONNECT
                             or (state or "").startswith("08")
                             or (state is None and isinstance(exc, (psycopg.OperationalError,
                                                                    psycopg.InterfaceError))))
                if transient and attempt < self.max_retries:
                    attempt += 1
                    if state not in _RETRY_SAME_CONN:
                        self._drop_conn()
                    log.warning("payments sink: transient error (%s), retry %d/%d: %s",
                                state, attempt, self.max_retries, str(exc).strip())
                    self._sleep(attempt)
                    continue
                raise SinkError(f"flush of {len(rows)} payments to {self.table} failed"
                                f"{' after ' + str(attempt) + ' retries' if attempt else ''} "
                                f"[SQLSTATE {state}]: {str(exc).strip()}") from None
        self._buffer.clear()
        self._oldest = None

    def _rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except Exception:  # noqa: BLE001
                self._drop_conn()

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 2000.0, 0.01)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # noqa: BLE001 - raised by the next process()/close()
                        log.error("payments sink: flush failed, the task will fail: %s", exc)
                        self._error = exc

    # -- ForeachWriter contract --------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise SinkError("open() called twice on one writer")
        try:
            self._connect()
        except BaseException:
            self._drop_conn()
            raise
        self._opened = True
        if self.max_dwell_ms > 0:
            self._stop.clear()
            self._timer = threading.Thread(target=self._timer_loop, name="payments-sink-timer", daemon=True)
            self._timer.start()
        return True                       # never False: Spark would drop the partition without a trace

    def process(self, row: Any) -> None:
        if not self._opened:
            raise SinkError("process() before open() or after close(): the payment would be lost")
        payment = _check(row)
        with self._lock:
            if self._error is not None:
                raise self._error
            seen = self._buffer.get(payment[0])
            if seen is not None:
                if seen != payment:
                    raise LedgerConflictError(
                        f"payment event_id={payment[0]!r} arrived twice in one flush with different "
                        f"values: (account={seen[1]!r}, amount={seen[2]}) and "
                        f"(account={payment[1]!r}, amount={payment[2]})")
                return                    # an identical duplicate: one payment
            if self._oldest is None:
                self._oldest = time.monotonic()
            self._buffer[payment[0]] = payment
            if len(self._buffer) >= self.max_batch_rows:
                try:
                    self._flush_locked()
                except BaseException as exc:
                    self._error = exc
                    raise

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._stop.set()
        try:
            if self._timer is not None:
                self._timer.join()
                self._timer = None
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()
                else:                     # the task failed: Spark replays; unwritten rows are not lost
                    self._buffer.clear()
                    self._rollback()
        finally:
            self._drop_conn()
            self._opened = False
            log.info("payments sink: %d inserted, %d replayed (identical)", self.inserted, self.replayed)


def PaymentsWriter(dsn: str, table: str, **options: Any) -> _PaymentsForeachWriter:  # noqa: N802
    """The foreach writer for the append-only ledger ``table`` (``payments`` layout).

    ``options``: ``max_batch_rows`` (1000), ``max_dwell_ms`` (100), ``max_retries`` (8).
    """
    return _PaymentsForeachWriter(dsn, table, **options)
