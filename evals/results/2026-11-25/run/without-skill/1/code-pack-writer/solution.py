"""EventsWriter(dsn, table) -> hardened Postgres upsert foreach writer.

NOTE ON THE REQUESTED PACKAGE
The prompt asks to use the pack's own `rtm_lakebase` writer ("installed with
the skill"). In this run no skill is installed: the package is not in the
Python environment's site-packages, and I was not allowed to read the
location it would have come from. So I could not check its API or use it.
Rather than guess at an unknown API, this module provides a self-contained
writer with the same contract (the one from the code-pg-sink task).
If `rtm_lakebase` is available in your environment, prefer its writer and
keep this file's EventsWriter(dsn, table) signature as a thin adapter.

Guarantees (see the class docstring for details):
  * newest version wins: ON CONFLICT (id) DO UPDATE ... WHERE t.version < EXCLUDED.version
    (replays and late older versions are no-ops);
  * hostile values: bind parameters only, table name quoted as an identifier,
    invalid rows (null/empty id, non-integer or out-of-range version, NUL
    characters, non-text payload) raise - never silently skipped;
  * Postgres restart / broken connection: reconnect with exponential backoff,
    idempotent retry of the row; unreachable server: raise after the retry
    budget; open() never returns False;
  * each row is committed in process() (real-time batches are long; nothing
    waits for close()).
"""
from __future__ import annotations

import logging
import random
import time
from typing import Any, Optional, Sequence, Tuple, Union

import psycopg
from psycopg import errors, sql

log = logging.getLogger(__name__)

BIGINT_MIN = -(2**63)
BIGINT_MAX = 2**63 - 1

# Errors worth retrying on a fresh connection: the server went away / is
# restarting / the network broke, or a transient concurrency conflict.
RETRYABLE = (
    psycopg.OperationalError,  # includes AdminShutdown, connection failures
    psycopg.InterfaceError,  # connection already closed
    errors.SerializationFailure,
    errors.DeadlockDetected,
)


class EventsWriter:
    """Foreach writer upserting (id, version, payload) rows into Postgres."""

    def __init__(
        self,
        dsn: str,
        table: Union[str, Sequence[str]],
        max_retry_seconds: float = 60.0,
        connect_timeout: int = 5,
        statement_timeout_ms: int = 30_000,
    ) -> None:
        # Only picklable configuration here: the instance is serialized to
        # the executors; the connection is created in open().
        self.dsn = dsn
        self.table = table
        self.max_retry_seconds = float(max_retry_seconds)
        self.connect_timeout = int(connect_timeout)
        self.statement_timeout_ms = int(statement_timeout_ms)
        self._conn: Optional[psycopg.Connection] = None
        self._partition_id: Any = None
        self._epoch_id: Any = None
        self._rows = 0

    # ------------------------------------------------------------------ SQL
    def _table_ident(self) -> sql.Composable:
        if isinstance(self.table, (list, tuple)):
            parts = list(self.table)
        else:
            # "schema.table" or "table"; each part is quoted separately
            parts = str(self.table).split(".")
        if not parts or any(p == "" for p in parts) or len(parts) > 3:
            raise ValueError(f"invalid table name {self.table!r}")
        return sql.Identifier(*parts)

    def _upsert_sql(self) -> sql.Composed:
        return sql.SQL(
            "INSERT INTO {t} AS t (id, version, payload) VALUES (%s, %s, %s) "
            "ON CONFLICT (id) DO UPDATE "
            "SET version = EXCLUDED.version, payload = EXCLUDED.payload "
            "WHERE t.version < EXCLUDED.version"
        ).format(t=self._table_ident())

    # ----------------------------------------------------------- connection
    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(
            self.dsn,
            autocommit=True,  # each upsert is its own committed transaction
            connect_timeout=self.connect_timeout,
            options=f"-c statement_timeout={self.statement_timeout_ms}",
            keepalives=1,
            keepalives_idle=10,
            keepalives_interval=5,
            keepalives_count=3,
            application_name="EventsWriter",
        )

    def _drop_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a dead connection; the real error is re-raised by the caller
                log.debug("ignoring error while discarding a broken connection", exc_info=True)

    def _with_retry(self, what: str, fn):
        """Run fn(conn) with reconnect + exponential backoff on transient errors."""
        deadline = time.monotonic() + self.max_retry_seconds
        delay = 0.2
        attempt = 0
        while True:
            attempt += 1
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                return fn(self._conn)
            except RETRYABLE as exc:
                self._drop_conn()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"EventsWriter: {what} failed after {attempt} attempts over "
                        f"{self.max_retry_seconds:.0f}s (partition={self._partition_id}, "
                        f"epoch={self._epoch_id}): {exc}"
                    ) from exc
                sleep = min(delay, remaining) * (0.5 + random.random() / 2)
                log.warning(
                    "EventsWriter: %s failed (attempt %d: %s); retrying in %.2fs",
                    what, attempt, exc, sleep,
                )
                time.sleep(sleep)
                delay = min(delay * 2, 5.0)

    # ------------------------------------------------------- row validation
    @staticmethod
    def _fields(row: Any) -> Tuple[Any, Any, Any]:
        if hasattr(row, "asDict"):
            d = row.asDict()
            return d.get("id"), d.get("version"), d.get("payload")
        if isinstance(row, dict):
            return row.get("id"), row.get("version"), row.get("payload")
        if isinstance(row, (tuple, list)) and len(row) == 3:
            return row[0], row[1], row[2]
        raise TypeError(f"EventsWriter: unsupported row type {type(row).__name__}: {row!r}")

    @staticmethod
    def _validate(row: Any) -> Tuple[str, int, Optional[str]]:
        rid, version, payload = EventsWriter._fields(row)
        if rid is None or not isinstance(rid, str) or rid == "":
            raise ValueError(f"EventsWriter: row has no valid text id: {row!r}")
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValueError(f"EventsWriter: version must be an integer, got {version!r} in {row!r}")
        if not BIGINT_MIN <= version <= BIGINT_MAX:
            raise ValueError(f"EventsWriter: version {version} out of bigint range in {row!r}")
        if payload is not None and not isinstance(payload, str):
            raise TypeError(f"EventsWriter: payload must be text or null, got {type(payload).__name__} in {row!r}")
        for name, value in (("id", rid), ("payload", payload)):
            if value is not None and "\x00" in value:
                # Postgres text cannot hold NUL; refusing is better than
                # silently storing a different value.
                raise ValueError(f"EventsWriter: {name} contains a NUL character: {row!r}")
        return rid, version, payload

    # ------------------------------------------------ ForeachWriter protocol
    def open(self, partition_id, epoch_id) -> bool:
        self._partition_id = partition_id
        self._epoch_id = epoch_id
        self._rows = 0
        self._upsert = self._upsert_sql()  # fails fast on a bad table name
        # Connect now so an unreachable server fails the task here (after
        # retries) instead of returning False, which would skip the rows.
        self._with_retry("connect", lambda conn: conn.execute("SELECT 1"))
        return True

    def process(self, row) -> None:
        params = self._validate(row)

        def write(conn: psycopg.Connection) -> None:
            conn.execute(self._upsert, params)

        # Synchronous, committed write per row: nothing waits for close(),
        # which in real-time mode only comes at the end of a long batch.
        self._with_retry(f"upsert of id={params[0]!r} version={params[1]}", write)
        self._rows += 1

    def close(self, error) -> None:
        conn, self._conn = self._conn, None
        if error is not None:
            # Spark re-raises `error` itself after close(); rows already
            # written are committed and idempotent, the rest are replayed.
            log.error(
                "EventsWriter: partition %s epoch %s failed after %d rows: %r",
                self._partition_id, self._epoch_id, self._rows, error,
            )
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    log.warning("EventsWriter: error closing connection after failure", exc_info=True)
            return
        if conn is not None:
            conn.close()  # nothing pending (autocommit); a failure here is raised
