"""Exactly-once foreach writer for the append-only ledger ``payments``.

    from solution import PaymentsWriter
    query = (payments.writeStream
             .foreach(PaymentsWriter(dsn, "payments"))
             .outputMode("update")                  # real-time mode accepts update only
             .option("checkpointLocation", ckpt)
             .trigger(realTime="5 minutes")         # checkpoint interval, not a latency
             .start())

Why this is exactly once
------------------------
Spark's delivery to a ``foreach`` sink is at-least-once: after a failure the
uncommitted epoch is replayed, possibly split across tasks differently, and
rows a killed task had already committed come again.  ``COPY``/plain
``INSERT`` would duplicate them.  So the ledger key, ``event_id`` (the primary
key), makes the write idempotent:

* each flush is ONE transaction: ``INSERT ... SELECT FROM unnest(...)
  ON CONFLICT (event_id) DO NOTHING RETURNING event_id`` - an event already in
  the ledger is never inserted twice and never overwritten (append-only: no
  ``DO UPDATE``);
* in the same transaction, every event that was *not* inserted is read back
  and compared with what arrived; a different account or amount for a known
  event_id is not a replay but a conflict, and fails the task naming the
  event_id (nothing of that flush is committed) instead of being ignored;
* a transaction either commits all of its rows or none: a task killed
  mid-flush, or Postgres restarting mid-epoch, leaves no partial flush; the
  writer reconnects and retries the whole flush (safe even when the COMMIT's
  outcome was unknown, because the retry is idempotent), and whatever a dead
  task never wrote comes back with Spark's replay.
* Two tasks writing the same event_id at once (a replay split differently):
  the primary key makes one insert win and the other a verified no-op; rows
  are sorted by event_id so concurrent flushes lock in the same order.

Original amount, no hidden errors
---------------------------------
* ``amount`` must be a ``Decimal`` (or ``int``) that fits ``numeric(p,s)`` of
  the column *exactly*: a value with more decimals than the scale would be
  rounded by Postgres, a ``float`` has already lost cents - both fail the task
  naming the event_id, never written altered.  Amounts travel as ``numeric``
  (binary), never through ``float`` or string formatting.
* Null ``event_id``/``account``/``amount``, the same event_id twice in one
  task with different content, a value Postgres refuses: the task fails with
  ``LedgerError`` naming the event_id; nothing of that flush is written.
* ``open()`` returns ``True`` or raises, never ``False`` (Spark would skip the
  partition's rows without a trace); every flush error is raised by the next
  ``process()``/``close()`` and never swallowed; it is also logged at ERROR on
  the executor the moment it happens and passed to ``on_failure`` (optional,
  e.g. a pager), because under real-time mode stock ``foreach`` surfaces a
  worker's error only when the long batch ends.
* Real-time mode calls ``open()``/``close()`` once per long batch, so rows are
  flushed from ``process()`` (``max_batch_rows``) and by a timer thread
  (``max_dwell_ms``), not only in ``close()``.

SQL is composed with ``psycopg.sql`` identifiers and bound parameters only.
"""
from __future__ import annotations

import decimal
import logging
import random
import threading
import time
from typing import Any, Callable

import psycopg
from psycopg import sql

log = logging.getLogger("payments_writer")

COLUMNS = ("event_id", "account", "amount")
_RETRY_SQLSTATES = ("40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300")


class LedgerError(RuntimeError):
    """A payment that cannot be written exactly; ``event_id`` names it (None: not one row's fault)."""

    def __init__(self, message: str, event_id: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.event_id, self.sqlstate = event_id, sqlstate


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PaymentsWriter:
    """PySpark ``foreach`` writer: insert-if-absent on ``event_id``, verified, one transaction per flush."""

    _SETTINGS = ("dsn", "schema", "table", "max_batch_rows", "max_dwell_ms", "max_retries",
                 "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s", "on_failure")

    def __init__(self, dsn: str, table: str = "payments", *, max_batch_rows: int = 1000,
                 max_dwell_ms: int = 100, max_retries: int = 8, backoff_initial_ms: int = 250,
                 backoff_max_ms: int = 5000, connect_timeout_s: int = 10,
                 on_failure: Callable[[str], None] | None = None):
        if not dsn:
            raise ValueError("dsn is required")
        parts = table.split(".")
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
        self.dsn = dsn
        self.schema, self.table = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        self.max_batch_rows, self.max_dwell_ms = int(max_batch_rows), int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms, self.backoff_max_ms = backoff_initial_ms, backoff_max_ms
        self.connect_timeout_s = int(connect_timeout_s)
        self.on_failure = on_failure  # picklable: a module-level function or functools.partial
        self._reset()

    def _reset(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._lock: threading.Lock | None = None
        self._buffer: dict[str, tuple] = {}
        self._oldest: float | None = None
        self._error: BaseException | None = None
        self._stop: threading.Event | None = None
        self._timer: threading.Thread | None = None
        self._opened = False
        self._precision: int | None = None
        self._scale: int | None = None
        self._insert = self._verify = None
        self.rows_inserted = 0
        self.rows_already_present = 0

    def __getstate__(self):  # only settings travel to executors
        return {k: self.__dict__[k] for k in self._SETTINGS}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def __repr__(self):  # the DSN may hold a password
        return f"PaymentsWriter(table={self._name()!r})"

    def _name(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    def _target(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table) if self.schema else sql.Identifier(self.table)

    # -- foreach contract ------------------------------------------------------------------
    def open(self, partition_id: int, epoch_id: int) -> bool:
        if self._opened:
            raise LedgerError("open() called while already open")
        self._conn = self._connect()
        try:
            self._load_table()
        except BaseException:
            self._close_conn()  # Spark calls no close() when open() raises
            raise
        self._lock = threading.Lock()
        self._buffer, self._oldest, self._error = {}, None, None
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._timer_loop, name="payments-flush", daemon=True)
        self._timer.start()
        self._opened = True
        return True

    def process(self, row) -> None:
        if not self._opened:
            raise LedgerError("process() called before open() or after close()")
        self._raise_stored()
        event_id, account, amount = self._checked(row)
        with self._lock:
            self._raise_stored()
            held = self._buffer.get(event_id)
            if held is not None:
                if held != (event_id, account, amount):
                    self._fail(LedgerError(
                        f"payment event_id={event_id!r} arrived twice in one task with different content: "
                        f"{held[1:]!r} then {(account, amount)!r}", event_id))
                return  # the same payment again (a duplicate upstream): written once
            self._buffer[event_id] = (event_id, account, amount)
            if self._oldest is None:
                self._oldest = time.monotonic()
            if len(self._buffer) >= self.max_batch_rows:
                self._flush_locked()
                self._raise_stored()

    def close(self, error) -> None:
        if not self._opened:
            return
        self._opened = False
        try:
            self._stop.set()
            self._timer.join(timeout=120)
            if error is None:
                with self._lock:
                    if self._error is None and self._buffer:
                        self._flush_locked()
                self._raise_stored()
            # with an error, rows not yet committed are left to Spark's replay of the epoch
        finally:
            log.info("payments sink: %d inserted, %d already present (replays)",
                     self.rows_inserted, self.rows_already_present)
            self._close_conn()

    # -- rows ---------------------------------------------------------------------------------
    def _checked(self, row) -> tuple[str, str, decimal.Decimal]:
        data = row.asDict() if hasattr(row, "asDict") else dict(row)
        missing = [c for c in COLUMNS if c not in data]
        extra = [f for f in data if f not in COLUMNS]
        event_id = data.get("event_id")
        if missing or extra:
            self._fail(LedgerError(f"payment event_id={event_id!r}: fields {sorted(data)} do not match "
                                   f"the ledger's columns {list(COLUMNS)}", event_id))
        if not isinstance(event_id, str) or not event_id:
            self._fail(LedgerError(f"payment with event_id={event_id!r}: event_id must be a non-empty string",
                                   event_id))
        account, amount = data["account"], data["amount"]
        if not isinstance(account, str):
            self._fail(LedgerError(f"payment event_id={event_id!r}: account is {account!r}, "
                                   "not a string (the column is NOT NULL)", event_id))
        for name, text in (("event_id", event_id), ("account", account)):
            if "\x00" in text:
                self._fail(LedgerError(f"payment event_id={event_id!r}: {name} contains a NUL byte", event_id))
        if isinstance(amount, bool) or not isinstance(amount, (decimal.Decimal, int)):
            self._fail(LedgerError(f"payment event_id={event_id!r}: amount {amount!r} is a "
                                   f"{type(amount).__name__}; only Decimal keeps the original amount "
                                   "(cast the column to DecimalType upstream)", event_id))
        amount = decimal.Decimal(amount)
        if not amount.is_finite():
            self._fail(LedgerError(f"payment event_id={event_id!r}: amount {amount} is not a number", event_id))
        exact = self._fits(amount)
        if exact is None:
            self._fail(LedgerError(
                f"payment event_id={event_id!r}: amount {amount} does not fit numeric({self._precision},"
                f"{self._scale}) exactly; Postgres would round or refuse it", event_id))
        return event_id, account, exact

    def _fits(self, amount: decimal.Decimal) -> decimal.Decimal | None:
        """The amount at the column's scale if that changes nothing, else None."""
        if self._scale is None:
            return amount
        quantum = decimal.Decimal(1).scaleb(-self._scale)
        with decimal.localcontext() as ctx:
            ctx.prec = 1000
            q = amount.quantize(quantum, rounding=decimal.ROUND_HALF_EVEN)
            if q != amount:
                return None
            if self._precision is not None and abs(q) >= decimal.Decimal(10) ** (self._precision - self._scale):
                return None
        return q

    # -- flushing -------------------------------------------------------------------------------
    def _raise_stored(self) -> None:
        if self._error is not None:
            raise self._error

    def _fail(self, error: BaseException):
        """Report at once (log + on_failure), then raise; the caller's task fails with it."""
        log.error("payments sink: %s", error)
        if self.on_failure is not None:
            try:
                self.on_failure(str(error))
            except Exception:  # an alert that fails must not replace the real error
                log.exception("on_failure raised")
        raise error

    def _timer_loop(self) -> None:
        period = max(self.max_dwell_ms / 4000.0, 0.005)
        while not self._stop.wait(period):
            with self._lock:
                if self._error is None and self._buffer and \
                        (time.monotonic() - self._oldest) * 1000.0 >= self.max_dwell_ms:
                    self._flush_locked()

    def _flush_locked(self) -> None:
        """Write the buffer in one transaction; any final failure is stored, reported and re-raised later."""
        try:
            self._flush()
        except BaseException as exc:
            self._error = exc
            try:
                self._fail(exc)
            except BaseException:
                pass  # stored: raised by the next process() or close()

    def _flush(self) -> None:
        rows = [self._buffer[k] for k in sorted(self._buffer)]
        ids, accounts, amounts = (list(c) for c in zip(*rows))
        for attempt in range(self.max_retries + 1):
            try:
                inserted, present = self._write_once(rows, ids, accounts, amounts)
                self.rows_inserted += inserted
                self.rows_already_present += present
                self._buffer.clear()
                self._oldest = None
                return
            except LedgerError:
                raise
            except psycopg.Error as exc:
                self._rollback()
                state = exc.sqlstate or ""
                if state[:2] in ("22", "23") or (isinstance(exc, psycopg.DataError) and not state):
                    raise self._name_bad_row(rows, exc) from None
                transient = (isinstance(exc, psycopg.OperationalError) or state in _RETRY_SQLSTATES
                             or state.startswith("08"))
                if not transient or attempt == self.max_retries:
                    raise LedgerError(f"flush of {len(rows)} payments to {self._name()} failed after "
                                      f"{attempt + 1} attempt(s): {_first_line(exc)}"
                                      f"{f' [SQLSTATE {state}]' if state else ''}; nothing of it was "
                                      "committed, Spark replays it when the query restarts",
                                      None, state or None) from None
                log.warning("payments sink: flush attempt %d failed (%s); retrying", attempt + 1,
                            _first_line(exc))
                self._sleep(attempt)
                if self._conn is None or self._conn.closed or self._conn.broken:
                    self._close_conn()
                    self._conn = self._connect()  # retries with backoff itself; raises LedgerError at the end

    def _write_once(self, rows, ids, accounts, amounts) -> tuple[int, int]:
        conn = self._conn
        if conn is None:
            raise psycopg.OperationalError("no connection")
        with conn.cursor() as cur:
            cur.execute(self._insert, [ids, accounts, amounts])
            inserted = {r[0] for r in cur.fetchall()}
            others = [i for i in ids if i not in inserted]
            if others:
                # a fresh statement (READ COMMITTED): sees rows other tasks committed meanwhile
                cur.execute(self._verify, [others])
                stored = {r[0]: (r[1], r[2]) for r in cur.fetchall()}
                incoming = {r[0]: r for r in rows}
                for event_id in others:
                    _, account, amount = incoming[event_id]
                    if event_id not in stored:
                        raise LedgerError(f"payment event_id={event_id!r} was neither inserted nor found "
                                          f"in {self._name()}; nothing of this flush was committed", event_id)
                    if stored[event_id] != (account, amount):
                        conn.rollback()
                        raise LedgerError(
                            f"payment event_id={event_id!r} is already in {self._name()} with account/amount "
                            f"{stored[event_id][0]!r}/{stored[event_id][1]} but arrived again with "
                            f"{account!r}/{amount}: not a replay; nothing of this flush was committed",
                            event_id)
        conn.commit()
        return len(inserted), len(others)

    def _name_bad_row(self, rows, exc: psycopg.Error) -> LedgerError:
        """Replay row by row in a transaction that is always rolled back; name the first that fails."""
        try:
            with self._conn.transaction(force_rollback=True):
                for event_id, account, amount in rows:
                    try:
                        with self._conn.transaction():
                            self._conn.execute(self._insert, [[event_id], [account], [amount]])
                    except psycopg.Error as row_exc:
                        return LedgerError(
                            f"payment event_id={event_id!r} rejected by {self._name()}: {_first_line(row_exc)} "
                            f"[SQLSTATE {row_exc.sqlstate}]; nothing of this flush was committed",
                            event_id, row_exc.sqlstate)
        except psycopg.Error:
            self._rollback()
        return LedgerError(f"flush to {self._name()} failed: {_first_line(exc)} [SQLSTATE {exc.sqlstate}]; "
                           "nothing of this flush was committed", None, exc.sqlstate)

    # -- set-up and connection --------------------------------------------------------------------
    def _load_table(self) -> None:
        with self._conn.cursor() as cur:
            cur.execute(
                "SELECT a.attname, format_type(a.atttypid, -1), a.atttypmod FROM pg_attribute a "
                "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
                [self._target().as_string(self._conn)])
            found = {name: (cast, mod) for name, cast, mod in cur.fetchall()}
            cur.execute(
                "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) "
                "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary",
                [self._target().as_string(self._conn)])
            (pkey,) = cur.fetchone()
        self._conn.rollback()
        if not found:
            raise LedgerError(f"table {self._name()} does not exist")
        missing = [c for c in COLUMNS if c not in found]
        if missing:
            raise LedgerError(f"table {self._name()} has no column(s) {missing}")
        if pkey != ["event_id"]:
            raise LedgerError(f"table {self._name()} needs PRIMARY KEY (event_id) for exactly-once writes, "
                              f"has {pkey}")
        cast, typmod = found["amount"]
        if cast != "numeric":
            raise LedgerError(f"{self._name()}.amount is {cast}; a ledger amount must be numeric")
        if typmod >= 4:
            self._precision, self._scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        target, cols = self._target(), sql.SQL(", ").join(sql.Identifier(c) for c in COLUMNS)
        self._insert = sql.SQL(
            "INSERT INTO {t} ({cols}) "
            "SELECT u.event_id, u.account, u.amount "
            "FROM unnest({ids}::text[], {accounts}::text[], {amounts}::numeric[]) AS u(event_id, account, amount) "
            "ON CONFLICT ({key}) DO NOTHING RETURNING {key}").format(
            t=target, cols=cols, ids=sql.Placeholder(), accounts=sql.Placeholder(),
            amounts=sql.Placeholder(), key=sql.Identifier("event_id"))
        self._verify = sql.SQL("SELECT {k}, {a}, {m} FROM {t} WHERE {k} = ANY({ids})").format(
            k=sql.Identifier("event_id"), a=sql.Identifier("account"), m=sql.Identifier("amount"),
            t=target, ids=sql.Placeholder())

    def _connect(self) -> psycopg.Connection:
        for attempt in range(self.max_retries + 1):
            try:
                return psycopg.connect(self.dsn, autocommit=False, connect_timeout=self.connect_timeout_s,
                                       application_name="payments-foreach-sink", keepalives=1,
                                       keepalives_idle=30, keepalives_interval=10, keepalives_count=3)
            except psycopg.OperationalError as exc:
                text = str(exc).lower()
                permanent = ("authentication" in text or "does not exist" in text
                             or "permission denied" in text) and "starting up" not in text
                if permanent or attempt == self.max_retries:
                    raise LedgerError(f"cannot connect to Postgres for {self._name()} after {attempt + 1} "
                                      f"attempt(s): {_first_line(exc)}") from None
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _rollback(self) -> None:
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.rollback()
            except psycopg.Error:
                pass

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection must not replace the real error
                log.debug("ignoring error while closing", exc_info=True)

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_initial_ms * 2 ** attempt, self.backoff_max_ms)
        time.sleep(delay * random.uniform(0.5, 1.0) / 1000.0)
