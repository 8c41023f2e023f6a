"""Exactly-once (effectively) foreach writer for the append-only ledger ``payments``.

Usage (PySpark real-time mode)::

    from solution import PaymentsWriter
    (payments.writeStream
       .foreach(PaymentsWriter("host=... dbname=... user=... password=...", "payments"))
       .outputMode("update")
       .option("checkpointLocation", "/chk/payments")
       .trigger(realTime="5 minutes")
       .start())

How every payment lands exactly once with its original amount
-------------------------------------------------------------
Spark's ``foreach`` delivery is at-least-once: after a failure the epoch (the whole
long batch in real-time mode) is replayed, possibly split across tasks differently,
and a killed executor's task is re-run from the start. So the writer does not try
to avoid duplicates in Spark; it makes the *write* idempotent on the natural key:

    INSERT INTO payments (event_id, account, amount)
    SELECT * FROM unnest($1::text[], $2::text[], $3::numeric[])
    ON CONFLICT (event_id) DO NOTHING

* A replayed payment that is already stored is skipped, whatever task or partition
  carries it, so the ledger ends as one clean run would leave it. Never an
  ``ON CONFLICT DO UPDATE SET amount = amount + ...`` (a replay would double it)
  and never a plain ``INSERT`` that would fail the query forever on replay.
* The stored row is the first one written: the original amount is never
  overwritten. A replayed event whose account/amount differ from the stored row
  is reported (logged at ERROR with the event_id and counted in ``metrics``);
  the stored original is kept.
* Each flush is one statement in one transaction: it is written completely or not
  at all. If Postgres restarts (or the connection drops) mid-flush, the transaction
  is rolled back by the server; the writer closes the dead connection, reconnects
  with exponential backoff and re-runs the whole flush. If the connection died
  during COMMIT (outcome unknown), re-running is still safe: rows that did commit
  are skipped by ``DO NOTHING``. ``open()`` retries its connection the same way.
* An executor killed mid-task loses only uncommitted rows; Spark re-runs the task
  (or replays the epoch) and the committed ones are skipped.
* The amount travels as ``decimal.Decimal`` text, never through ``float``, and is
  cast to plain ``numeric`` (no ``numeric(18,2)`` cast that would round silently).
  An amount with more than 2 decimal places, or one too large for numeric(18,2),
  fails the task with the event_id named instead of being rounded.

No error is hidden: ``open()`` never returns False (Spark would drop the
partition's rows silently), every non-transient error and a retry budget that
runs out are raised with the event_id / table named, errors of the background
dwell-timer flush are raised by the next ``process()`` or by ``close()``, and
``close(error)`` never commits the rows of a failed task (Spark replays them).
Requires psycopg 3 on the executors.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["PaymentsWriter", "PaymentsForeachWriter", "SinkError", "BadRowError"]

log = logging.getLogger("payments_sink")

COLUMNS = ("event_id", "account", "amount")
_CENT = Decimal("0.01")
_MAX_AMOUNT = Decimal("1e16")  # numeric(18,2): at most 16 digits before the point


class SinkError(RuntimeError):
    """A flush or connection that failed for good (never swallowed)."""


class BadRowError(SinkError):
    """One payment cannot be stored as sent; the message names its event_id."""


def _transient(exc: BaseException, conn) -> bool:
    """Could retrying on a new connection succeed? (lost connection, restart, serialization)."""
    import psycopg

    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("08") or state.startswith("57P") or state in ("40001", "40P01", "53300"):
        return True
    if conn is None or conn.closed or getattr(conn, "broken", False):
        return True
    return isinstance(exc, psycopg.OperationalError) and not state


class PaymentsForeachWriter:
    """Picklable PySpark ``foreach`` writer: insert-if-absent on event_id, retried, never hides errors."""

    _CONFIG = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "retry_for_s", "backoff_ms", "connect_timeout_s")

    def __init__(self, dsn: str, table: str, *, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 retry_for_s: float = 120.0, backoff_ms: int = 250, connect_timeout_s: int = 10):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty connection string")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty table name")
        self.dsn, self.table = dsn, table
        self.max_batch_rows, self.max_dwell_ms = max_batch_rows, max_dwell_ms
        self.retry_for_s, self.backoff_ms, self.connect_timeout_s = retry_for_s, backoff_ms, connect_timeout_s
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        return {k: self.__dict__[k] for k in self._CONFIG}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:  # the DSN may hold a password
        return f"PaymentsForeachWriter(table={self.table!r})"

    def _reset(self) -> None:
        self._conn = None
        self._insert = None
        self._lookup = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = threading.RLock()
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._open = False
        self.metrics = {"rows_received": 0, "rows_inserted": 0, "rows_already_stored": 0,
                        "rows_conflicting": 0, "flushes": 0, "reconnects": 0}

    # -- connection ----------------------------------------------------------------------
    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _connect_once(self) -> None:
        import psycopg

        self._close_connection()
        self._conn = psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                     application_name="payments-ledger-sink")

    def _with_retries(self, action, what: str):
        """Run ``action()``; on a transient failure reconnect with backoff until ``retry_for_s`` is spent."""
        import psycopg

        deadline = time.monotonic() + self.retry_for_s
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect_once()
                return action()
            except BadRowError:
                raise
            except psycopg.Error as exc:
                if not _transient(exc, self._conn):
                    try:
                        if self._conn is not None and not self._conn.closed:
                            self._conn.rollback()
                    except Exception:
                        self._close_connection()
                    raise SinkError(f"{what} failed: {type(exc).__name__}: {exc}"
                                    f"{f' [SQLSTATE {exc.sqlstate}]' if getattr(exc, 'sqlstate', None) else ''}"
                                    ) from None
                self._close_connection()
                attempt += 1
                delay = min(5.0, self.backoff_ms / 1000.0 * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
                if time.monotonic() + delay > deadline:
                    raise SinkError(f"{what} failed after {attempt} attempts over {self.retry_for_s:.0f} s: "
                                    f"{type(exc).__name__}: {exc}") from None
                log.warning("%s: transient %s (attempt %d), reconnecting in %.2f s",
                            what, type(exc).__name__, attempt, delay)
                self.metrics["reconnects"] += 1
                time.sleep(delay)

    def _build_statements(self) -> None:
        from psycopg import sql

        if "." in self.table and not self.table.startswith('"'):
            schema, _, name = self.table.partition(".")
            target = sql.Identifier(schema, name)
        else:
            target = sql.Identifier(self.table.strip('"'))
        self._insert = sql.SQL(
            "INSERT INTO {t} (event_id, account, amount) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::numeric[]) "
            "ON CONFLICT (event_id) DO NOTHING RETURNING event_id").format(t=target)
        self._lookup = sql.SQL(
            "SELECT event_id, account, amount FROM {t} WHERE event_id = ANY(%s::text[])").format(t=target)

    # -- rows ------------------------------------------------------------------------------
    @staticmethod
    def _values(row: Any) -> tuple:
        if hasattr(row, "asDict"):
            data = row.asDict(recursive=False)
        elif isinstance(row, dict):
            data = row
        else:
            data = dict(zip(COLUMNS, row))
        missing = [c for c in COLUMNS if c not in data]
        if missing:
            raise BadRowError(f"payment row lacks field(s) {', '.join(missing)} (it has {sorted(data)})")
        event_id, account, amount = data["event_id"], data["account"], data["amount"]
        if event_id is None:
            raise BadRowError("payment with a null event_id: it cannot be stored exactly once")
        if account is None:
            raise BadRowError(f"payment event_id={event_id!r}: account is null (NOT NULL column)")
        if amount is None:
            raise BadRowError(f"payment event_id={event_id!r}: amount is null (NOT NULL column)")
        if isinstance(amount, bool):
            raise BadRowError(f"payment event_id={event_id!r}: amount is a boolean")
        try:
            if isinstance(amount, float):
                amount = Decimal(repr(amount))  # the shortest exact text, never binary noise
            elif not isinstance(amount, Decimal):
                amount = Decimal(amount)
        except (InvalidOperation, TypeError, ValueError):
            raise BadRowError(f"payment event_id={event_id!r}: amount {amount!r} is not a number") from None
        if not amount.is_finite():
            raise BadRowError(f"payment event_id={event_id!r}: amount {amount} is not finite")
        if amount != amount.quantize(_CENT) if abs(amount) < _MAX_AMOUNT else True:
            raise BadRowError(f"payment event_id={event_id!r}: amount {amount} does not fit numeric(18,2) "
                              "without rounding; refused rather than changed")
        return str(event_id), account, amount

    # -- flushing ----------------------------------------------------------------------------
    def _flush_locked(self) -> None:
        if not self._buffer:
            return
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        ids = [r[0] for r in rows]
        params = (ids, [r[1] for r in rows], [r[2] for r in rows])

        def write():
            with self._conn.cursor() as cur:
                cur.execute(self._insert, params)
                inserted = {r[0] for r in cur.fetchall()}
                stored = []
                if len(inserted) < len(rows):
                    cur.execute(self._lookup, ([i for i in ids if i not in inserted],))
                    stored = cur.fetchall()
            self._conn.commit()
            return inserted, stored

        inserted, stored = self._with_retries(write, f"flush of {len(rows)} payments into {self.table}")
        sent = {r[0]: r for r in rows}
        for event_id, account, amount in stored:
            _, s_account, s_amount = sent[event_id]
            if account != s_account or amount != s_amount:
                self.metrics["rows_conflicting"] += 1
                log.error("payment event_id=%r already stored with account=%r amount=%s; a later event with "
                          "the same id carries account=%r amount=%s: the stored original is kept",
                          event_id, account, amount, s_account, s_amount)
        self.metrics["rows_inserted"] += len(inserted)
        self.metrics["rows_already_stored"] += len(rows) - len(inserted)
        self.metrics["flushes"] += 1
        self._buffer.clear()
        self._oldest = None

    def _timer_loop(self) -> None:
        interval = max(self.max_dwell_ms, 10) / 2000.0
        while not self._stop.wait(interval):
            with self._lock:
                if not self._open or self._error is not None or self._oldest is None:
                    continue
                if (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                    try:
                        self._flush_locked()
                    except BaseException as exc:  # raised by the next process() or by close()
                        log.error("flush into %s failed: %s", self.table, exc)
                        self._error = exc

    def _raise_stored(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    # -- foreach contract ---------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        self._close_connection()
        self._reset()
        try:
            self._build_statements()
            self._with_retries(lambda: None, f"connecting to Postgres for {self.table}")
        except BaseException:
            self._close_connection()  # Spark calls no close() when open() raises
            raise
        self._open = True
        if self.max_dwell_ms > 0:
            self._timer = threading.Thread(target=self._timer_loop, name="payments-sink-timer", daemon=True)
            self._timer.start()
        return True  # never False: that would make Spark skip these payments without an error

    def process(self, row: Any) -> None:
        if not self._open:
            raise SinkError("process() called on a writer that is not open")
        values = self._values(row)
        with self._lock:
            self._raise_stored()
            self.metrics["rows_received"] += 1
            if values[0] not in self._buffer:  # first occurrence wins, as DO NOTHING keeps the first
                self._buffer[values[0]] = values
                if self._oldest is None:
                    self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()

    def close(self, error: BaseException | None) -> None:
        if not self._open:
            self._close_connection()
            return
        self._open = False
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=60)
        try:
            with self._lock:
                if error is None:
                    self._raise_stored()
                    self._flush_locked()
                    log.info("payments sink closed: %s", self.metrics)
                else:
                    # The task failed: Spark replays these rows; DO NOTHING makes that exactly-once.
                    self._buffer.clear()
        finally:
            self._close_connection()


def PaymentsWriter(dsn: str, table: str) -> PaymentsForeachWriter:
    """The foreach writer for ``df.writeStream.foreach(...)``."""
    return PaymentsForeachWriter(dsn, table)
