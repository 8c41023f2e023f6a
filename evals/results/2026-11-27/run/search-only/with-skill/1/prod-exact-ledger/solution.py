"""Exactly-once foreach writer for the append-only ledger ``payments``.

Table: ``payments (event_id text primary key, account text not null, amount numeric(18,2) not null)``.

Usage (real-time mode, PySpark)::

    from solution import PaymentsWriter

    query = (df.writeStream
             .foreach(PaymentsWriter(dsn, "payments"))
             .outputMode("update")                    # real-time mode accepts only "update"
             .option("checkpointLocation", checkpoint)
             .trigger(realTime="5 minutes")           # checkpoint interval, not a latency target
             .start())

How "every payment exactly once, with its original amount" holds
-------------------------------------------------------------------
Spark's ``foreach`` delivery is at-least-once: after a failure the unfinished
epoch is replayed, possibly split across tasks differently, and rows that an
earlier attempt already committed arrive again. Exactly-once in the table
comes from the table's key, not from Spark:

* Every flush is ``INSERT ... ON CONFLICT (event_id) DO NOTHING``. A payment
  already in the ledger is never inserted twice and never overwritten: the
  first stored amount stays (append-only; no UPDATE is ever issued). This is
  correct whatever task, attempt or split the replayed row comes from, and
  when two attempts of one task write at the same time (a killed executor's
  zombie and its retry): the primary key serialises them.
* Each flush is ONE statement in ONE transaction, so it is written entirely or
  not at all. A flush interrupted by a Postgres restart or a dropped
  connection is retried on a new connection (bounded, jittered backoff, about
  45 s in total by default, enough for a restart); if the COMMIT itself was
  lost in flight, the retry finds the rows present and inserts nothing.
* An executor killed mid-task: what it committed stays, what it buffered is
  lost with it, and Spark replays the whole epoch, which fills exactly the
  gap.
* The epoch is only committed by Spark after every task's ``close()``
  returned, and ``close()`` returns only after the last flush committed. Any
  failure raises (``process()``, ``close()``); ``open()`` never returns
  ``False``; nothing is retried forever and nothing is dropped silently.
* Amounts travel as ``Decimal`` (never ``float``) and are cast to
  ``numeric``; Postgres rounds to 2 digits exactly as a plain INSERT does. A
  ``float`` amount (a DoubleType column) is converted through its shortest
  repr, not its binary expansion. NULL ``account``/``amount``/``event_id`` is
  a bad row: the task fails naming the ``event_id``.
* A duplicate ``event_id`` whose account or amount differs from the stored
  payment is not a replay but a data problem: the stored original is kept and
  the conflict is reported (logged at ERROR with the event_id, stored and
  stored values; counted in ``writer.conflicting_duplicates``). Pass
  ``fail_on_conflicting_duplicate=True`` to fail the task instead (a replay
  then fails again until the source is fixed).

Real-time mode calls ``open()``/``close()`` once per long batch, so the buffer
is flushed from ``process()`` (``max_batch_rows``) and from a timer
(``max_dwell_ms``), not only in ``close()``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from decimal import Decimal, InvalidOperation
from typing import Any

log = logging.getLogger("payments_writer")

KEY = "event_id"
_NAMES = ("event_id", "account", "amount")
_BAD_ROW_CLASSES = ("22", "23", "54")
_RETRY_CODES = ("40001", "40P01")
#: After the table, column or privileges are gone, retrying cannot help.
_PERMANENT_CODES = ("42P01", "42703", "42501", "28000", "28P01", "3D000")


class PaymentsSinkError(RuntimeError):
    """A flush that cannot succeed; names the event_id when one row is the cause."""


def _table_identifier(table: str):
    """``payments``, ``schema.payments`` or ``"Quoted"."Name"``, read as SQL reads it."""
    from psycopg import sql

    parts: list[str] = []
    rest = table.strip()
    while rest:
        if rest.startswith('"'):
            end, name = 1, []
            while True:
                nxt = rest.find('"', end)
                if nxt < 0:
                    raise ValueError(f"unterminated quoted identifier in table name {table!r}")
                name.append(rest[end:nxt])
                if rest[nxt + 1:nxt + 2] == '"':
                    name.append('"')
                    end = nxt + 2
                    continue
                rest = rest[nxt + 1:]
                break
            parts.append("".join(name))
        else:
            dot = rest.find(".")
            parts.append((rest if dot < 0 else rest[:dot]).strip().lower())
            rest = "" if dot < 0 else rest[dot:]
        rest = rest.strip()
        if rest.startswith("."):
            rest = rest[1:].strip()
            if not rest:
                raise ValueError(f"empty name part in table name {table!r}")
        elif rest:
            raise ValueError(f"cannot read table name {table!r}")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'table' or 'schema.table', got {table!r}")
    return sql.Identifier(*parts)


def _insert_sql(table: str):
    """Insert-if-absent from per-column arrays; returns the rows that met a DIFFERENT stored payment.

    The final SELECT runs on the statement's snapshot, so it sees only payments stored before this
    statement: exactly the ones the insert skipped."""
    from psycopg import sql

    e, a, m = (sql.Identifier(c) for c in _NAMES)
    return sql.SQL(
        "WITH r AS (SELECT u.{e}, u.{a}, u.{m} FROM unnest(%s::text[], %s::text[], %s::numeric[]) AS u({e}, {a}, {m})), "
        "ins AS (INSERT INTO {t} ({e}, {a}, {m}) SELECT {e}, {a}, {m} FROM r "
        "ON CONFLICT ({e}) DO NOTHING RETURNING {e}) "
        "SELECT r.{e}, p.{a}, p.{m}::text, r.{a}, r.{m}::text FROM r JOIN {t} p ON p.{e} = r.{e} "
        "WHERE r.{e} NOT IN (SELECT {e} FROM ins) "
        "AND (p.{a}, p.{m}) IS DISTINCT FROM (r.{a}, round(r.{m}, 2))").format(
        t=_table_identifier(table), e=e, a=a, m=m)


def _row_sql(table: str):
    from psycopg import sql

    e, a, m = (sql.Identifier(c) for c in _NAMES)
    return sql.SQL("INSERT INTO {t} ({e}, {a}, {m}) VALUES (%s::text, %s::text, %s::numeric) "
                   "ON CONFLICT ({e}) DO NOTHING").format(t=_table_identifier(table), e=e, a=a, m=m)


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(exc, "sqlstate", None) or getattr(getattr(exc, "diag", None), "sqlstate", None)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _row_values(row: Any) -> tuple:
    if hasattr(row, "asDict"):
        d = row.asDict(recursive=False)
    elif isinstance(row, dict):
        d = row
    elif isinstance(row, (tuple, list)) and len(row) == len(_NAMES):
        d = dict(zip(_NAMES, row))
    else:
        raise PaymentsSinkError(f"cannot read a row of type {type(row).__name__}")
    key = d.get(KEY)
    for c in _NAMES:
        if c not in d:
            raise PaymentsSinkError(f"payment event_id={key!r}: column {c!r} is missing from the row")
    for c in _NAMES:
        if d[c] is None:
            raise PaymentsSinkError(f"payment event_id={key!r}: {c} is null; the ledger requires it "
                                    "(the row was not written and not dropped)")
    account = d["account"]
    if not isinstance(key, str) or not isinstance(account, str):
        raise PaymentsSinkError(f"payment event_id={key!r}: event_id and account must be strings")
    if "\x00" in key or "\x00" in account:
        raise PaymentsSinkError(f"payment event_id={key!r}: a NUL character cannot be stored in text")
    amount = d["amount"]
    if isinstance(amount, bool):
        raise PaymentsSinkError(f"payment event_id={key!r}: amount {amount!r} is not a number")
    if isinstance(amount, float):
        if math.isnan(amount) or math.isinf(amount):
            raise PaymentsSinkError(f"payment event_id={key!r}: amount {amount!r} is not a finite number")
        amount = Decimal(repr(amount))  # the shortest decimal of the double, not its binary expansion
    elif isinstance(amount, int):
        amount = Decimal(amount)
    elif isinstance(amount, str):
        try:
            amount = Decimal(amount)
        except InvalidOperation:
            raise PaymentsSinkError(f"payment event_id={key!r}: amount {amount!r} is not a number") from None
    elif not isinstance(amount, Decimal):
        raise PaymentsSinkError(f"payment event_id={key!r}: amount of type {type(amount).__name__}")
    if not amount.is_finite():
        raise PaymentsSinkError(f"payment event_id={key!r}: amount {amount} is not a finite number")
    return key, account, amount


class PaymentsWriter:
    """PySpark ``foreach`` writer; ``PaymentsWriter(dsn, table)`` is the object to pass to ``foreach``."""

    _SETTINGS = ("dsn", "table", "max_batch_rows", "max_dwell_ms", "max_retries", "backoff_initial_ms",
                 "backoff_max_ms", "fail_on_conflicting_duplicate")

    def __init__(self, dsn: str, table: str, max_batch_rows: int = 1000, max_dwell_ms: int = 100,
                 max_retries: int = 10, backoff_initial_ms: int = 250, backoff_max_ms: int = 8000,
                 fail_on_conflicting_duplicate: bool = False) -> None:
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        _table_identifier(table)  # a bad table name fails on the driver, before the query starts
        if max_batch_rows < 1 or max_dwell_ms < 1 or max_retries < 0:
            raise ValueError("max_batch_rows and max_dwell_ms must be >= 1, max_retries >= 0")
        self.dsn = dsn
        self.table = table
        self.max_batch_rows = max_batch_rows
        self.max_dwell_ms = max_dwell_ms
        self.max_retries = max_retries
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.fail_on_conflicting_duplicate = fail_on_conflicting_duplicate
        self._reset()

    def _reset(self) -> None:
        self._conn = None
        self._sql = None
        self._row_sql = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._lock = None
        self._stop = None
        self._thread = None
        self._error: BaseException | None = None
        self._opened = False
        self.rows_flushed = 0
        self.conflicting_duplicates = 0

    def __getstate__(self) -> dict:  # only the settings travel to the executors
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset()

    # -- foreach contract --------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise RuntimeError("PaymentsWriter.open() called twice without close()")
        self._sql = _insert_sql(self.table)
        self._row_sql = _row_sql(self.table)
        self._connect_with_retries()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._buffer, self._oldest, self._error = {}, None, None
        self._opened = True
        self._thread = threading.Thread(target=self._timer, name=f"payments-flusher-{partition_id}", daemon=True)
        self._thread.start()
        return True  # never False: Spark would skip this partition's payments without an error

    def process(self, row: Any) -> None:
        if not self._opened:
            raise RuntimeError("PaymentsWriter.process() called before open() or after close()")
        self._raise_stored()
        values = _row_values(row)
        with self._lock:
            self._raise_stored()
            old = self._buffer.get(values[0])
            if old is None:
                self._buffer[values[0]] = values  # the first row of an event_id is the original
                if self._oldest is None:
                    self._oldest = time.monotonic()
                if len(self._buffer) >= self.max_batch_rows:
                    self._flush_locked()
            elif (old[1], old[2]) != (values[1], values[2]):
                self._conflict(values[0], old[1], old[2], values[1], values[2])

    def close(self, error: BaseException | None) -> None:
        if not self._opened:
            return
        self._opened = False
        try:
            self._stop.set()
            self._thread.join(timeout=300)
            if error is None and self._error is None:
                with self._lock:
                    self._flush_locked()
            self._raise_stored()
        finally:
            # with an error, unwritten rows are discarded on purpose: Spark replays the epoch
            self._buffer = {}
            if self._conn is not None:
                try:
                    self._conn.close()
                except Exception:
                    pass
                self._conn = None

    # -- internals ------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _timer(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            try:
                with self._lock:
                    if self._error is None and self._oldest is not None and \
                            (time.monotonic() - self._oldest) * 1000 >= self.max_dwell_ms:
                        self._flush_locked()
            except BaseException as exc:  # raised by the next process() or close(): never hidden
                log.error("payments sink: flush failed, nothing more is written: %s", _first_line(exc))
                self._error = exc
                return

    def _conflict(self, event_id: str, stored_account: Any, stored_amount: Any, account: Any, amount: Any) -> None:
        self.conflicting_duplicates += 1
        message = (f"payment event_id={event_id!r} arrived again with account={account!r} amount={amount} "
                   f"but the ledger holds account={stored_account!r} amount={stored_amount}; "
                   "the original is kept")
        log.error("payments sink: %s", message)
        if self.fail_on_conflicting_duplicate:
            raise PaymentsSinkError(message)

    def _connect(self) -> None:
        import psycopg

        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None
        self._conn = psycopg.connect(self.dsn, autocommit=False, application_name="payments-foreach-sink")

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * (0.5 + random.random() / 2))

    def _connect_with_retries(self) -> None:
        import psycopg

        for attempt in range(self.max_retries + 1):
            try:
                self._connect()
                return
            except psycopg.OperationalError as exc:
                text = str(exc).lower()
                if attempt == self.max_retries or "authentication failed" in text or "does not exist" in text:
                    raise
                log.warning("payments sink: connect retry %d after %s", attempt + 1, _first_line(exc))
                self._sleep(attempt)

    def _rollback(self) -> None:
        try:
            if self._conn is not None and not self._conn.closed:
                self._conn.rollback()
        except Exception:
            pass

    def _flush_locked(self) -> None:
        """Insert the buffer (caller holds the lock): one statement, one transaction, retried whole."""
        import psycopg

        if not self._buffer:
            self._oldest = None
            return
        keys = sorted(self._buffer)  # one lock order for every task
        rows = [self._buffer[k] for k in keys]
        params = (keys, [r[1] for r in rows], [r[2] for r in rows])
        for attempt in range(self.max_retries + 1):
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                with self._conn.cursor() as cur:
                    cur.execute(self._sql, params)
                    conflicts = cur.fetchall()
                self._conn.commit()
                break
            except Exception as exc:
                self._rollback()
                state = _sqlstate(exc) or ""
                if state[:2] in _BAD_ROW_CLASSES:
                    raise self._name_bad_row(rows, exc) from exc
                transient = (isinstance(exc, psycopg.OperationalError) and state not in _PERMANENT_CODES) \
                    or state in _RETRY_CODES or state[:2] == "08" or state in ("57P01", "57P02", "57P03")
                if not transient or attempt == self.max_retries:
                    log.error("payments sink: flush of %d payments failed: %s", len(rows), _first_line(exc))
                    raise
                log.warning("payments sink: flush retry %d after %s", attempt + 1, _first_line(exc))
                if isinstance(exc, psycopg.OperationalError):
                    try:
                        self._conn.close()
                    except Exception:
                        pass
                self._sleep(attempt)
        self.rows_flushed += len(rows)
        self._buffer = {}
        self._oldest = None
        for event_id, stored_account, stored_amount, account, amount in conflicts:
            self._conflict(event_id, stored_account, stored_amount, account, amount)

    def _name_bad_row(self, rows: list[tuple], exc: BaseException) -> PaymentsSinkError:
        """Replay row by row in a transaction that is always rolled back, to name the refused payment."""
        try:
            with self._conn.cursor() as cur:
                for values in rows:
                    try:
                        cur.execute(self._row_sql, values)
                    except Exception as row_exc:
                        self._rollback()
                        return PaymentsSinkError(f"payment event_id={values[0]!r} refused by Postgres: "
                                                 f"{_first_line(row_exc)} (not written, not dropped)")
                    self._rollback()
        except Exception:
            self._rollback()
        return PaymentsSinkError(f"flush of {len(rows)} payments refused by Postgres: {_first_line(exc)}")
