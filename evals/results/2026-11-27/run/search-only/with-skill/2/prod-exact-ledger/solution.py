"""Exactly-once foreach writer for the append-only Postgres ledger ``payments``.

``PaymentsWriter(dsn, table)`` returns a picklable PySpark ``foreach`` writer
(``open``/``process``/``close``) for a real-time (or micro-batch) query.

How "every payment exactly once, with its original amount" is kept
------------------------------------------------------------------
Spark's delivery to a ``foreach`` sink is at-least-once: after a failure the
unfinished epoch (in real-time mode the whole long batch) is replayed, possibly
split across tasks differently, and a task that dies mid-way may already have
committed some of its flushes. So the writer makes every write idempotent on the
payment's identity instead of trying to avoid replays:

* **Insert-if-absent on ``event_id``** (the primary key), one set-based
  statement and one transaction per flush::

      INSERT INTO payments (event_id, account, amount)
      SELECT ... FROM unnest(%b::text[], %b::text[], %b::numeric[]) AS u(...)
      ON CONFLICT (event_id) DO NOTHING
      RETURNING event_id

  A replayed payment that is already there is skipped, never updated, so the
  stored amount stays the original one; a payment that is not there yet is
  inserted. Whatever was or was not committed before an executor died or
  Postgres restarted, the replay converges to each payment exactly once. The
  primary key (not a task, partition or epoch id) decides, so a replay split
  across tasks differently converges too; two tasks inserting the same id at
  the same moment are serialised by the unique index (the second does nothing).
* **Never an UPDATE, never a plain INSERT, never COPY**: an append through
  ``COPY``/``INSERT`` would duplicate on replay; an upsert would overwrite the
  original amount.
* **Commit outcome unknown** (connection lost during ``COMMIT``, Postgres
  restarted mid-epoch): the writer reconnects and retries the same flush (bounded,
  jittered backoff, 6 retries, about 13 s); insert-if-absent makes that safe.
* **Amounts are never changed.** The amount is bound as a ``Decimal`` (a ``float``
  is converted from its ``repr``, never through binary arithmetic) and cast to
  ``numeric`` without a modifier. A value that ``numeric(18,2)`` would silently
  round (more than 2 decimal places that are not zeros), NaN, infinity, or too
  many digits is refused before anything of its flush is sent, as a
  ``BadRowError`` naming the ``event_id``.
* **No error is hidden.** ``open()`` raises when it cannot connect and never
  returns ``False`` (Spark would then drop the partition's rows silently); a row
  Postgres refuses (NULL account or amount, ...) fails the task with an error
  naming its ``event_id``, and nothing of that flush is written (a replay
  retries it); an error of the flusher thread is logged at ERROR on the executor
  at once and raised by the next ``process()`` or by ``close()``; retries that
  run out raise. Rows of a failed task are never "written anyway".
* **Conflicting duplicates are reported, not applied.** When a payment id is
  already stored with a *different* account or amount, the stored original is
  kept and a WARNING names the id (``on_conflict="fail"`` makes it fail the task
  instead).

Buffering for real-time mode: rows are buffered one per ``event_id`` (the first
one stays), flushed sorted by ``event_id`` (concurrent tasks take index locks in
the same order: no deadlocks) when ``max_batch_rows`` ids are buffered or when
the oldest buffered row is ``max_dwell_ms`` old, by a flusher thread, because
under real-time mode ``close()`` runs only at the end of each long batch.

Requires ``psycopg`` 3 on the executors.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from decimal import Decimal, InvalidOperation
from typing import Any, Optional

log = logging.getLogger("payments_writer")

_COLUMNS_QUERY = """
SELECT a.attname,
       format_type(COALESCE(NULLIF(bt.typbasetype, 0), bt.oid), -1) AS cast_type,
       (t2.typcategory = 'A') AS is_array,
       CASE WHEN format_type(a.atttypid, NULL) = 'numeric' AND a.atttypmod >= 4
            THEN ((a.atttypmod - 4) >> 16) & 65535 END AS num_precision,
       CASE WHEN format_type(a.atttypid, NULL) = 'numeric' AND a.atttypmod >= 4
            THEN (a.atttypmod - 4) & 65535 END AS num_scale
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_type bt ON bt.oid = a.atttypid
JOIN pg_catalog.pg_type t2 ON t2.oid = COALESCE(NULLIF(bt.typbasetype, 0), bt.oid)
WHERE c.relname = %(table)s
  AND n.nspname = COALESCE(%(schema)s, current_schema())
  AND c.relkind IN ('r', 'p')
  AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_RECONNECT_CODES = {"57P01", "57P02", "57P03", "25006", "40003", "53300"}
_RETRY_CODES = {"40001", "40P01"}
_BAD_ROW_PREFIXES = ("22", "23", "54", "42804", "42846", "21000")


class SinkError(RuntimeError):
    def __init__(self, message: str, sqlstate: Optional[str] = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


class BadRowError(SinkError):
    def __init__(self, message: str, event_id: Any = None, sqlstate: Optional[str] = None):
        super().__init__(message, sqlstate)
        self.event_id = event_id

    def __reduce__(self):
        return (BadRowError, (str(self), self.event_id, self.sqlstate))


def _sqlstate(exc: BaseException) -> Optional[str]:
    return getattr(exc, "sqlstate", None)


def _kind(exc: BaseException) -> str:
    import psycopg

    state = _sqlstate(exc)
    if state:
        if state.startswith("08") or state in _RECONNECT_CODES:
            return "reconnect"
        if state in _RETRY_CODES:
            return "retry"
        if state.startswith(_BAD_ROW_PREFIXES):
            return "bad_row"
        return "permanent"
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
        return "reconnect"  # includes a connection lost during COMMIT: retrying is safe (insert-if-absent)
    if isinstance(exc, (psycopg.DataError, TypeError, ValueError, OverflowError)):
        return "bad_row"
    return "permanent"


def _split_table(table: str):
    parts = [p.strip('"') if p.startswith('"') else p.lower() for p in table.split(".")]
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
    return (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])


class PaymentsWriter:
    """Picklable PySpark ``foreach`` writer: each payment exactly once (insert-if-absent on event_id)."""

    def __init__(self, dsn: str, table: str = "payments", key_column: str = "event_id",
                 max_batch_rows: int = 1000, max_dwell_ms: int = 100, max_retries: int = 6,
                 backoff_initial_ms: int = 250, backoff_max_ms: int = 5000, connect_timeout_s: int = 10,
                 on_conflict: str = "warn"):
        if not isinstance(dsn, str) or not dsn:
            raise ValueError("dsn must be a non-empty libpq connection string or URL")
        if max_batch_rows < 1 or max_dwell_ms < 0 or max_retries < 0:
            raise ValueError("max_batch_rows >= 1, max_dwell_ms >= 0 and max_retries >= 0 are required")
        if on_conflict not in ("warn", "fail"):
            raise ValueError("on_conflict must be 'warn' (keep the original, log) or 'fail'")
        self.dsn = dsn
        self.table = table
        self.schema_name, self.table_name = _split_table(table)
        self.key_column = key_column
        self.max_batch_rows = int(max_batch_rows)
        self.max_dwell_ms = int(max_dwell_ms)
        self.max_retries = int(max_retries)
        self.backoff_initial_ms = int(backoff_initial_ms)
        self.backoff_max_ms = int(backoff_max_ms)
        self.connect_timeout_s = int(connect_timeout_s)
        self.on_conflict = on_conflict
        self._reset()

    _CONFIG = ("dsn", "table", "schema_name", "table_name", "key_column", "max_batch_rows", "max_dwell_ms",
               "max_retries", "backoff_initial_ms", "backoff_max_ms", "connect_timeout_s", "on_conflict")

    def __getstate__(self):
        return {k: getattr(self, k) for k in self._CONFIG}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)
        self._reset()

    def __repr__(self):
        return f"PaymentsWriter(table={self.table!r})"  # never the DSN: it may hold a password

    def _reset(self):
        self._conn = None
        self._cond = threading.Condition()
        self._buffer: dict = {}
        self._oldest: Optional[float] = None
        self._pending: Optional[list] = None
        self._stopping = False
        self._error: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        self._columns: Optional[list] = None
        self._casts: dict = {}
        self._arrays: set = set()
        self._numeric: dict = {}   # column -> (precision, scale) of numeric(p,s) columns
        self._insert = None
        self._key_i = 0
        self._open = False
        self.rows_inserted = 0
        self.rows_already_there = 0
        self.partition_id = self.epoch_id = None

    # ---- foreach contract -------------------------------------------------------------------
    def open(self, partition_id, epoch_id):
        """Connect (with retries), read the column types, start the flusher. Raises; never returns False."""
        if self._open:
            raise SinkError("open() called while the writer is open; call close() first")
        self._reset()
        self.partition_id, self.epoch_id = partition_id, epoch_id
        self._conn = self._connect_with_retries()
        try:
            rows = self._conn.execute(_COLUMNS_QUERY, {"table": self.table_name,
                                                       "schema": self.schema_name}).fetchall()
        except Exception:
            self._close_conn()
            raise
        if not rows:
            self._close_conn()
            raise SinkError(f"table {self.table!r} not found")
        self._casts = {r[0]: r[1] for r in rows}
        self._arrays = {r[0] for r in rows if r[2]}
        self._numeric = {r[0]: (r[3], r[4]) for r in rows if r[3] is not None}
        if self.key_column not in self._casts:
            self._close_conn()
            raise SinkError(f"key column {self.key_column!r} is not a column of {self.table!r}")
        self._open = True
        self._thread = threading.Thread(target=self._flusher, daemon=True,
                                        name=f"payments-flusher-p{partition_id}")
        self._thread.start()
        return True

    def process(self, row):
        if not self._open:
            raise SinkError("process() called on a writer that is not open; the row was not written")
        values = self._values(row)
        key = values[self._key_i]
        if key is None:
            raise BadRowError(f"payment with a NULL {self.key_column} cannot be written exactly once "
                              f"(row {values!r})", None)
        self._check_amounts(key, values)
        with self._cond:
            if self._error is not None:
                raise self._error
            if key not in self._buffer:  # first row of an id stays (as the table keeps the first)
                if not self._buffer:
                    self._oldest = time.monotonic()
                self._buffer[key] = values
            elif self._buffer[key] != values:
                self._conflict(key, self._buffer[key], values, "within one batch")
            if len(self._buffer) >= self.max_batch_rows:
                while self._pending is not None and self._error is None:  # back-pressure
                    self._cond.wait()
                if self._error is not None:
                    raise self._error
                self._pending, self._buffer, self._oldest = list(self._buffer.values()), {}, None
                self._cond.notify_all()

    def close(self, error):
        if not self._open:
            return
        self._open = False
        with self._cond:
            if error is not None:  # the task failed: Spark replays the epoch; insert-if-absent absorbs it
                self._buffer, self._pending = {}, None
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._close_conn()
        log.info("payments sink closed (partition=%s epoch=%s): %d inserted, %d already there",
                 self.partition_id, self.epoch_id, self.rows_inserted, self.rows_already_there)
        if error is None and self._error is not None:
            raise self._error

    # ---- flusher thread (the only user of the connection after open()) ----------------------
    def _flusher(self):
        dwell = self.max_dwell_ms / 1000.0
        while True:
            with self._cond:
                while True:
                    if self._error is not None:
                        return
                    if self._pending is not None:
                        batch, self._pending = self._pending, None
                        break
                    age = time.monotonic() - self._oldest if self._oldest is not None else None
                    if self._buffer and (self._stopping or (dwell > 0 and age >= dwell)):
                        batch, self._buffer, self._oldest = list(self._buffer.values()), {}, None
                        break
                    if self._stopping:
                        return
                    self._cond.wait(max(dwell - age, 0.001) if (age is not None and dwell > 0) else 0.5)
                self._cond.notify_all()
            try:
                self._write(batch)
            except BaseException as exc:
                log.error("payments sink: flush failed; nothing more is written and the task fails: %s", exc)
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return

    def _arrays_of(self, batch: list) -> list:
        arrays = [list(col) for col in zip(*batch)]
        for i, c in enumerate(self._columns):
            if c in self._arrays:
                arrays[i] = [None if v is None else _array_text(v) for v in arrays[i]]
        return arrays

    def _write(self, batch: list):
        batch.sort(key=lambda r: r[self._key_i])
        arrays = self._arrays_of(batch)
        attempt = 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect_with_retries()
                inserted = {r[0] for r in self._conn.execute(self._insert, arrays).fetchall()}
                break
            except SinkError:
                raise
            except Exception as exc:
                kind = _kind(exc)
                if kind == "bad_row":
                    raise self._name_bad_row(batch, exc) from None
                if kind == "permanent" or attempt >= self.max_retries:
                    raise SinkError(f"flush of {len(batch)} payment(s) to {self.table!r} failed after "
                                    f"{attempt + 1} attempt(s): {type(exc).__name__}: {exc}; nothing of it is "
                                    "known to be written except what a replay will find there",
                                    _sqlstate(exc)) from None
                if kind == "reconnect":
                    self._close_conn()
                log.warning("payments sink: %s (attempt %d of %d), retrying: %s", kind, attempt + 1,
                            self.max_retries, exc)
                self._sleep(attempt)
                attempt += 1
        self.rows_inserted += len(inserted)
        skipped = [r for r in batch if r[self._key_i] not in inserted]
        self.rows_already_there += len(skipped)
        if skipped:
            self._verify_originals(skipped)

    def _verify_originals(self, skipped: list):
        """Ids that were already stored: make sure the stored payment is the same one (report if not)."""
        from psycopg import sql

        target = self._target()
        others = [c for c in self._columns if c != self.key_column]
        if not others:
            return
        query = sql.SQL("SELECT {k}, {cols} FROM {t} WHERE {k} = ANY(%s)").format(
            k=sql.Identifier(self.key_column), t=target,
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in others))
        try:
            stored = {r[0]: r[1:] for r in self._conn.execute(query, [[r[self._key_i] for r in skipped]])}
        except Exception as exc:  # the write itself succeeded; the check is best effort, but say so
            log.warning("payments sink: could not compare %d replayed payment(s) with the stored ones: %s",
                        len(skipped), exc)
            return
        idx = [self._columns.index(c) for c in others]
        for r in skipped:
            old = stored.get(r[self._key_i])
            new = tuple(r[i] for i in idx)
            if old is not None and not _same(old, new):
                self._conflict(r[self._key_i], (r[self._key_i],) + tuple(old), r, "stored")

    def _conflict(self, key, kept, new, where: str):
        message = (f"payment {self.key_column}={key!r} arrived again with different values ({where}: "
                   f"{kept!r}, new: {new!r}); the original is kept")
        if self.on_conflict == "fail":
            raise BadRowError(message, key)
        log.warning("payments sink: %s", message)

    def _name_bad_row(self, batch: list, exc: BaseException) -> SinkError:
        """Replay the batch row by row in a transaction that is always rolled back; name the bad row."""
        try:
            with self._conn.transaction(force_rollback=True):
                for r in batch:
                    try:
                        with self._conn.transaction():
                            self._conn.execute(self._insert, self._arrays_of([r])).fetchall()
                    except Exception as row_exc:
                        if _kind(row_exc) != "bad_row":
                            raise
                        return BadRowError(f"payment {self.key_column}={r[self._key_i]!r} rejected by "
                                           f"{self.table!r}: {row_exc} [SQLSTATE {_sqlstate(row_exc)}]; nothing "
                                           "of its flush was written", r[self._key_i], _sqlstate(row_exc))
        except Exception:
            log.debug("finding the bad row failed", exc_info=True)
        return SinkError(f"flush to {self.table!r} failed: {type(exc).__name__}: {exc}; nothing of it was "
                         "written", _sqlstate(exc))

    # ---- helpers ------------------------------------------------------------------------------
    def _check_amounts(self, key, values: tuple):
        """Refuse a numeric value that the column would round, or NaN/infinity, naming the payment."""
        for c, (precision, scale) in self._numeric.items():
            if c not in self._columns:
                continue
            i = self._columns.index(c)
            v = values[i]
            if v is None:
                continue
            try:
                d = v if isinstance(v, Decimal) else Decimal(repr(v) if isinstance(v, float) else v)
            except (InvalidOperation, TypeError, ValueError):
                raise BadRowError(f"payment {self.key_column}={key!r}: {c}={v!r} is not a number", key) from None
            if not d.is_finite():
                raise BadRowError(f"payment {self.key_column}={key!r}: {c}={v!r} is not a finite amount", key)
            if precision is not None:
                digits_left = d.adjusted() + 1 if d != 0 else 0
                if digits_left > precision - (scale or 0):
                    raise BadRowError(f"payment {self.key_column}={key!r}: {c}={v} does not fit "
                                      f"numeric({precision},{scale})", key)
            if scale is not None:
                try:
                    exact = d == d.quantize(Decimal(1).scaleb(-scale))
                except InvalidOperation:
                    exact = False
                if not exact:
                    raise BadRowError(f"payment {self.key_column}={key!r}: {c}={v} has more than {scale} "
                                      f"decimal places; numeric({precision},{scale}) would round it, refused", key)

    def _values(self, row) -> tuple:
        data = row.asDict(recursive=False) if hasattr(row, "asDict") else dict(row)
        if self._columns is None:
            unknown = [c for c in data if c not in self._casts]
            if unknown:
                raise SinkError(f"row field(s) {unknown} are not columns of {self.table!r}")
            if self.key_column not in data:
                raise SinkError(f"rows must carry the key column {self.key_column!r}")
            self._columns = list(data)
            self._key_i = self._columns.index(self.key_column)
            self._insert = self._insert_statement()
        try:
            values = tuple(data[c] for c in self._columns)
        except KeyError as exc:
            raise SinkError(f"row is missing column {exc.args[0]!r}") from None
        # floats for numeric columns travel as exact Decimals of their repr, never as binary floats
        return tuple(Decimal(repr(v)) if isinstance(v, float) and c in self._numeric else v
                     for c, v in zip(self._columns, values))

    def _target(self):
        from psycopg import sql

        return sql.Identifier(self.schema_name, self.table_name) if self.schema_name \
            else sql.Identifier(self.table_name)

    def _insert_statement(self):
        import psycopg
        from psycopg import sql

        binary = sql.Placeholder(format=psycopg.adapt.PyFormat.BINARY)
        aliases = [sql.Identifier(f"c{i}") for i in range(len(self._columns))]
        params, picks = [], []
        for c, alias in zip(self._columns, aliases):
            if c in self._arrays:
                params.append(sql.SQL("{}::text[]").format(binary))
                picks.append(sql.SQL("u.{}::{}").format(alias, sql.SQL(self._casts[c])))
            else:
                params.append(sql.SQL("{}::{}[]").format(binary, sql.SQL(self._casts[c])))
                picks.append(sql.SQL("u.{}").format(alias))
        return sql.SQL("INSERT INTO {t} ({cols}) SELECT {picks} FROM unnest({params}) AS u({aliases}) "
                       "ON CONFLICT ({key}) DO NOTHING RETURNING {key}").format(
            t=self._target(), cols=sql.SQL(", ").join(sql.Identifier(c) for c in self._columns),
            picks=sql.SQL(", ").join(picks), params=sql.SQL(", ").join(params),
            aliases=sql.SQL(", ").join(aliases), key=sql.Identifier(self.key_column))

    def _connect_with_retries(self):
        import psycopg

        attempt = 0
        while True:
            try:
                return psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s,
                                       application_name="spark-payments-sink")
            except Exception as exc:
                state = _sqlstate(exc)
                text = str(exc).lower()
                refused = (state or "").startswith("28") or state in ("3D000", "42501") or any(
                    s in text for s in ("password authentication failed", "no pg_hba.conf entry",
                                        "does not exist", "permission denied"))
                if refused or attempt >= self.max_retries:
                    raise SinkError(f"could not connect to Postgres after {attempt + 1} attempt(s): "
                                    f"{type(exc).__name__}: {exc}", state) from None
                self._sleep(attempt)
                attempt += 1

    def _sleep(self, attempt: int):
        delay = min(self.backoff_initial_ms * (2 ** attempt), self.backoff_max_ms) / 1000.0
        time.sleep(delay * random.uniform(0.5, 1.0))

    def _close_conn(self):
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def _same(old: tuple, new: tuple) -> bool:
    for a, b in zip(old, new):
        if isinstance(a, Decimal) or isinstance(b, Decimal):
            try:
                if Decimal(a) != Decimal(b):
                    return False
            except Exception:
                return False
        elif a != b:
            return False
    return True


def _array_text(value: Any) -> str:
    from psycopg.adapt import PyFormat, Transformer

    return bytes(Transformer().get_dumper(value, PyFormat.TEXT).dump(value)).decode("utf-8")


__all__ = ["PaymentsWriter", "BadRowError", "SinkError"]
