"""Exactly-once (effectively-once) foreach writer for the append-only ``payments`` ledger.

``PaymentsWriter(dsn, table)`` is a PySpark ``foreach`` writer (``open`` / ``process`` /
``close``) for a real-time query::

    query = (payments.writeStream
             .foreach(PaymentsWriter(dsn, "payments"))
             .outputMode("update")
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")   # how often it checkpoints, not a latency
             .start())

How "every payment exactly once, with its original amount" holds
-----------------------------------------------------------------
Spark delivers rows to a ``foreach`` sink *at least once*: after a failure the unfinished
epoch is replayed, possibly partitioned across tasks differently. So exactly-once has to come
from the table, not from Spark:

* **The key is the payment, not the task.** Every write is ``INSERT ... ON CONFLICT
  (event_id) DO NOTHING``: a payment already in the ledger is never inserted twice and never
  updated (the ledger stays append-only), whichever task, epoch or attempt sends it again.
  Partitioning, epoch ids and attempt numbers play no part, so a replay split differently
  converges to the same ledger.
* **A replay that disagrees is an error, never silently ignored.** After each insert the
  writer reads the stored rows of the event_ids it did *not* insert (in the same
  transaction, after the insert, so it also sees a row another task committed a moment
  earlier) and compares account and amount. If an event_id comes back with another account
  or amount, the task fails with :class:`PaymentConflictError`, which names the event_id and
  both values, and that batch is rolled back. Two rows with one event_id and different
  values in the same batch fail the same way.
* **The original amount, to the cent.** ``amount`` goes to Postgres as a ``Decimal`` (PySpark's
  ``DecimalType``). A value Postgres would round into ``numeric(18,2)`` (more than 2
  decimals, as in ``0.1 + 0.2`` from a double) is refused, not rounded; a double whose
  shortest form has at most 2 decimals (``10.25``) is taken as that decimal. NaN, infinity,
  more than 16 integer digits, a null account or amount, and a null event_id are refused too.
  Each refusal is :class:`BadPaymentError`, naming the event_id and the column.
* **Nothing is acknowledged before it is committed.** ``close()`` writes what is left and
  returns only after COMMIT; any failure raises, so the task fails and Spark does not commit
  the epoch, then replays it (and the ``ON CONFLICT`` makes the replay harmless).
  ``open()`` never returns ``False``, because that makes Spark drop the partition's rows
  without an error.
* **Executor killed mid-task.** Each batch is one transaction: an open transaction dies with
  the connection and Postgres rolls it back. Committed batches stay. The replayed epoch
  inserts exactly the missing payments.
* **Postgres restarts mid-epoch.** A lost connection (class 08, 57P01/57P02/57P03, no
  SQLSTATE) is closed, and the writer reconnects and retries the same batch with backoff
  (``max_retries``, by default about 40 s in total). A COMMIT whose outcome is unknown is
  safe to retry: the rows either are there (``DO NOTHING``) or are not (inserted now). Past the
  budget the task fails loudly, and Spark's task retry or a query restart replays the epoch.
* Under real-time mode ``close()`` only comes at the end of a long batch, so rows are also
  written when ``max_batch_rows`` are buffered and, by a timer thread, once the oldest
  buffered row is ``max_dwell_ms`` old. An error of that thread is kept and raised by the
  next ``process()`` or ``close()``; it is never swallowed.
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
from psycopg.adapt import PyFormat

log = logging.getLogger(__name__)

_CENT = Decimal("0.01")
_MAX_ABS = Decimal("1e16")  # numeric(18,2): at most 16 digits before the point


class PaymentsSinkError(RuntimeError):
    """The sink could not write; the task fails and Spark replays the epoch."""

    def __init__(self, message: str, sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


class BadPaymentError(PaymentsSinkError):
    """A payment row cannot be stored exactly as sent."""

    def __init__(self, message: str, event_id: Any = None, column: str | None = None, sqlstate: str | None = None):
        super().__init__(message, sqlstate)
        self.event_id, self.column = event_id, column

    def __reduce__(self):
        return (type(self), (str(self), self.event_id, self.column, self.sqlstate))


class PaymentConflictError(BadPaymentError):
    """The same event_id came with another account or amount than the one recorded."""


def exact_amount(value: Any, event_id: Any) -> Decimal:
    """The amount as a Decimal with at most 2 decimals, unchanged; else BadPaymentError."""
    if value is None:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount is null (the column is NOT NULL)",
                              event_id, "amount")
    if isinstance(value, bool):
        raise BadPaymentError(f"payment event_id={event_id!r}: amount is a bool", event_id, "amount")
    try:
        if isinstance(value, Decimal):
            amount = value
        elif isinstance(value, int):
            amount = Decimal(value)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidOperation
            amount = Decimal(repr(value))  # the double's shortest decimal form, e.g. 10.25
        elif isinstance(value, str):
            amount = Decimal(value.strip())
        else:
            raise BadPaymentError(f"payment event_id={event_id!r}: amount of type {type(value).__name__} "
                                  f"({value!r}); send a decimal(18,2)", event_id, "amount")
    except (InvalidOperation, ValueError):
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} is not a number",
                              event_id, "amount") from None
    if not amount.is_finite():
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} is not finite", event_id, "amount")
    if amount.quantize(_CENT) != amount:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} has more than 2 decimals; "
                              "numeric(18,2) would round it, so it is refused (fix it upstream)",
                              event_id, "amount")
    if abs(amount) >= _MAX_ABS:
        raise BadPaymentError(f"payment event_id={event_id!r}: amount {value!r} does not fit numeric(18,2)",
                              event_id, "amount")
    return amount


def _split_table(table: str) -> sql.Identifier:
    """'payments', 'schema.payments' (folded to lower case as SQL does) or '"Schema"."Payments"'."""
    if not isinstance(table, str) or not table or "\x00" in table:
        raise ValueError(f"table must be a non-empty name, got {table!r}")
    names, buf, quoted, i = [], "", False, 0
    while i < len(table):
        c = table[i]
        if quoted:
            if c == '"' and table[i + 1:i + 2] == '"':
                buf, i = buf + '"', i + 1
            elif c == '"':
                quoted = False
            else:
                buf += c
        elif c == '"':
            quoted = True
        elif c == ".":
            names.append(buf)
            buf = ""
        else:
            buf += c.lower()
        i += 1
    names.append(buf)
    if quoted or len(names) > 2 or any(not n for n in names):
        raise ValueError(f"cannot read table name {table!r}")
    return sql.Identifier(*names)


def _field(row: Any, name: str) -> Any:
    try:
        return row[name]
    except (KeyError, ValueError, IndexError, TypeError):
        raise PaymentsSinkError(f"row has no field {name!r}; the payments writer needs event_id, account, amount") \
            from None


# SQLSTATEs after which reconnecting and retrying the same batch can succeed.
_RECONNECT = ("57P01", "57P02", "57P03", "25006", "40003", "53300")
_SAME_CONNECTION = ("40001", "40P01")


def _retryable(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None)
    if state is None:
        return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError))
    return state.startswith("08") or state in _RECONNECT or state in _SAME_CONNECTION


class PaymentsWriter:
    """``foreach`` writer: each payment into the ledger exactly once (insert-if-absent + conflict check)."""

    def __init__(self, dsn: str, table: str = "payments", max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 10, backoff_initial_ms: int = 250, backoff_max_ms: int = 8000):
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("need max_batch_rows >= 1, max_dwell_ms >= 0, max_retries >= 0")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms, self.max_retries = max_batch_rows, max_dwell_ms, max_retries
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        self._build_statements()  # a bad table name fails on the driver
        self._reset()

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
               "backoff_initial_ms", "backoff_max_ms")

    def __getstate__(self) -> dict:  # only configuration travels to the executors
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._build_statements()
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"PaymentsWriter(table={self.table!r})"

    def _build_statements(self) -> None:
        t, b = _split_table(self.table), sql.Placeholder(format=PyFormat.BINARY)
        # One statement per batch; the event_ids it inserted come back.
        self._insert = sql.SQL(
            "INSERT INTO {t} (event_id, account, amount) "
            "SELECT * FROM unnest({b}::text[], {b}::text[], {b}::numeric[]) "
            "ON CONFLICT (event_id) DO NOTHING RETURNING event_id").format(t=t, b=b)
        # What the ledger already holds for the event_ids that were not inserted (new snapshot).
        self._stored = sql.SQL("SELECT event_id, account, amount FROM {t} WHERE event_id = ANY({b}::text[])").format(
            t=t, b=b)

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._error: BaseException | None = None
        self._open = False
        self.inserted = 0  # payments this task added to the ledger
        self.already_present = 0  # replayed payments found identical in the ledger

    # -- the foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._open:
            raise PaymentsSinkError("open() called twice without close()")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect()
        try:
            if self.max_dwell_ms > 0:
                self._timer = threading.Thread(target=self._tick, daemon=True, name=f"payments-flusher-p{partition_id}")
                self._timer.start()
        except BaseException:
            self._close_connection()  # PySpark does not call close() when open() raises
            raise
        self._open = True
        return True  # never False: that would drop this partition's payments silently

    def process(self, row: Any) -> None:
        if not self._open:
            raise PaymentsSinkError("process() on a writer that is not open; the payment was not written")
        event_id, account, raw = _field(row, "event_id"), _field(row, "account"), _field(row, "amount")
        if event_id is None:
            raise BadPaymentError(f"payment with a null event_id (account={account!r}, amount={raw!r})",
                                  None, "event_id")
        if not isinstance(event_id, str) or "\x00" in event_id:
            raise BadPaymentError(f"payment event_id={event_id!r}: event_id must be text without NUL",
                                  event_id, "event_id")
        if account is None or not isinstance(account, str) or "\x00" in account:
            raise BadPaymentError(f"payment event_id={event_id!r}: account {account!r} is null or not valid text "
                                  "(the column is NOT NULL text)", event_id, "account")
        amount = exact_amount(raw, event_id)
        with self._lock:
            if self._error is not None:
                raise self._error
            held = self._buffer.get(event_id)
            if held is None:
                self._buffer[event_id] = (event_id, account, amount)
                if self._oldest is None:
                    self._oldest = time.monotonic()
            elif (held[1], held[2]) != (account, amount):
                raise PaymentConflictError(
                    f"payment event_id={event_id!r} arrived twice with different values: "
                    f"account={held[1]!r} amount={held[2]} and account={account!r} amount={amount}; "
                    "nothing of this task's unwritten rows was written", event_id, "amount")
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._stop.set()
        try:
            if self._timer is not None:
                self._timer.join()
            with self._lock:
                if error is None:
                    if self._error is not None:
                        raise self._error
                    self._flush_locked()  # returns only once COMMIT succeeded
                else:
                    self._buffer.clear()  # the task failed: Spark replays these payments
        finally:
            self._close_connection()
            log.info("payments sink closed (partition=%s epoch=%s): %d inserted, %d already in the ledger",
                     getattr(self, "partition_id", None), getattr(self, "epoch_id", None),
                     self.inserted, self.already_present)

    # -- writing -------------------------------------------------------------------------------
    def _tick(self) -> None:
        period = max(self.max_dwell_ms / 4000, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is not None or self._stop.is_set():
                    return
                if self._oldest is not None and (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # kept; raised by the next process() or close()
                        log.error("payments sink: flush failed; nothing more is written: %s", exc)
                        return

    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        batch = [self._buffer[k] for k in sorted(self._buffer)]  # key order: no deadlocks between tasks
        try:
            self._write(batch)
        except BaseException as exc:
            self._error = exc
            raise
        self._buffer.clear()
        self._oldest = None

    def _write(self, batch: list[tuple]) -> None:
        ids = [r[0] for r in batch]
        params = (ids, [r[1] for r in batch], [r[2] for r in batch])
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                with self._conn.transaction():
                    with self._conn.cursor() as cur:
                        cur.execute(self._insert, params)
                        inserted = {r[0] for r in cur.fetchall()}
                        missing = [i for i in ids if i not in inserted]
                        if missing:
                            self._check_replayed(cur, batch, missing)  # raises inside: rolled back
                self.inserted += len(inserted)
                self.already_present += len(batch) - len(inserted)
                return
            except PaymentsSinkError:
                raise
            except psycopg.Error as exc:
                state = getattr(exc, "sqlstate", None)
                if not _retryable(exc):
                    raise self._refused(batch, exc) from None
                if attempt >= self.max_retries:
                    raise PaymentsSinkError(
                        f"payments sink: batch of {len(batch)} payments not written after {attempt + 1} attempts "
                        f"({type(exc).__name__}, SQLSTATE {state}): {exc}; the task fails and Spark replays the "
                        "epoch", state) from None
                log.warning("payments sink: %s (SQLSTATE %s); retrying the batch in %.2fs",
                            type(exc).__name__, state, delay)
                if state not in _SAME_CONNECTION:
                    self._close_connection()  # a restarted server: reconnect for the retry
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)

    def _check_replayed(self, cur: psycopg.Cursor, batch: list[tuple], missing: list[str]) -> None:
        """Payments not inserted must already be in the ledger with the same account and amount."""
        sent = {r[0]: r for r in batch}
        cur.execute(self._stored, (missing,))
        stored = {r[0]: r for r in cur.fetchall()}
        for event_id in missing:
            row = stored.get(event_id)
            if row is None:  # not inserted and not there: cannot happen with ON CONFLICT DO NOTHING
                raise PaymentsSinkError(f"payment event_id={event_id!r} was neither inserted nor found in the ledger")
            _, account, amount = sent[event_id]
            if row[1] != account or row[2] != amount:
                raise PaymentConflictError(
                    f"payment event_id={event_id!r} is already in the ledger as account={row[1]!r} "
                    f"amount={row[2]}, but arrived again as account={account!r} amount={amount}; the ledger is "
                    "append-only, so this batch was rolled back and the task fails", event_id, "amount")

    def _refused(self, batch: list[tuple], exc: psycopg.Error) -> PaymentsSinkError:
        """Postgres refused the batch (not retryable): find and name the payment, rolled back."""
        state = getattr(exc, "sqlstate", None)
        try:
            with self._conn.transaction(force_rollback=True):
                with self._conn.cursor() as cur:
                    for row in batch:
                        try:
                            with self._conn.transaction():
                                cur.execute(self._insert, ([row[0]], [row[1]], [row[2]]))
                        except psycopg.Error as one:
                            return BadPaymentError(
                                f"payment event_id={row[0]!r} refused by Postgres (SQLSTATE "
                                f"{getattr(one, 'sqlstate', None)}): {str(one).strip()}; nothing of its batch of "
                                f"{len(batch)} was written", row[0], None, getattr(one, "sqlstate", None))
        except psycopg.Error:
            pass
        return PaymentsSinkError(f"payments sink: batch of {len(batch)} payments refused (SQLSTATE {state}): {exc}",
                                 state)

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _connect(self) -> psycopg.Connection:
        delay = self.backoff_initial_ms / 1000
        for attempt in range(self.max_retries + 1):
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=10,
                                       application_name="payments-foreach-sink")
            except psycopg.OperationalError as exc:
                if attempt >= self.max_retries:
                    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                    raise PaymentsSinkError(f"payments sink: cannot connect after {attempt + 1} attempts: {first}") \
                        from None
                time.sleep(delay * (0.5 + random.random() / 2))
                delay = min(delay * 2, self.backoff_max_ms / 1000)
        raise AssertionError("unreachable")


__all__ = ["PaymentsWriter", "PaymentsSinkError", "BadPaymentError", "PaymentConflictError", "exact_amount"]
