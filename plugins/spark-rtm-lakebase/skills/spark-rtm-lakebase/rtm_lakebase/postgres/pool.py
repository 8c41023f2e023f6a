"""Per-process reuse of the Python writer's Postgres connections across tasks.

Spark reuses a Python worker process for task after task (``spark.python.worker.reuse``,
on by default): the next micro-batch, or the next long batch under real-time mode.
Without reuse each task would connect, negotiate TLS and authenticate again. The
pool mirrors the JVM sink's per-executor pool (``rtm_lakebase/jvm/PgConnector.java``):

- a task that ends well hands its connection back (:meth:`ConnectionPool.give_back`); a
  failed task's connection is closed, never kept (:meth:`ConnectionPool.discard`);
- the next task of the same process with the same connection settings takes it
  (:meth:`ConnectionPool.take`): settings are matched by a keyed hash that lives only
  in this process, never by their text, so no key, log line or ``repr`` holds a secret;
- bounded: at most ``max_idle`` idle connections per target (default 4); one given back
  beyond that is closed;
- validated before use: an idle connection must answer ``SELECT 1`` within 2 s and be
  outside any transaction (one left in a transaction is rolled back when given back);
  a dead one is closed and the next tried, then a new one opened;
- aged out: an idle connection opened more than its maximum age ago is closed instead of
  reused (OAuth tokens rotate; a login is the only place Lakebase checks one). Each
  connection's age limit is ``max_age_s`` shortened by a random 0–10 % drawn when it
  opens (``psycopg_pool`` shortens ``max_lifetime`` by 0–5 % the same way), so the
  connections a query opened together do not all log in again at the same moment, and
  none lives longer than ``max_age_s``. A
  daemon thread closes idle ones past that age every ``reap_every_s`` (30 s) even when no
  task comes to take them (a worker the scheduler stopped sending sink tasks to);
- closed at process exit (``atexit``). Spark's daemon ends a forked worker with
  ``os._exit``, which skips ``atexit``; the kernel then closes the sockets and
  Postgres ends those sessions at once. A forked child forgets, without closing, the
  connections it inherited: they belong to its parent.

Thread-safe: one lock guards the idle lists; validation and closing run outside it.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import logging
import os
import pickle
import random
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import pq

from rtm_lakebase.postgres.connection import ConnectionSettings, connect

log = logging.getLogger(__name__)

#: Idle connections kept per target and process (the JVM sink's ``rtm.jvm.sink.maxIdle`` default).
MAX_IDLE = 4
#: Seconds a kept connection may live (since it was opened) before it is closed instead of reused.
MAX_AGE_S = 1800.0
#: Each connection's age limit is max_age_s × (1 − AGE_JITTER × a random number in [0, 1)).
AGE_JITTER = 0.1
#: Seconds an idle connection has to answer ``SELECT 1`` before it counts as dead.
VALIDATE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class PoolStats:
    """What this process's pool did: connections opened and reused, and why any were closed.

    ``closed_dead``: failed validation; ``closed_old``: past the maximum age; ``closed_full``:
    given back beyond ``max_idle``; ``closed_failed``: its task failed; ``idle``: kept now.
    """

    opened: int
    reused: int
    closed_dead: int
    closed_old: int
    closed_full: int
    closed_failed: int
    idle: int


#: Seconds between two sweeps of the thread that closes idle connections past their age.
REAP_EVERY_S = 30.0


class _Idle:
    __slots__ = ("conn", "opened_at", "max_age_s")

    def __init__(self, conn: psycopg.Connection, opened_at: float, max_age_s: float):
        self.conn, self.opened_at, self.max_age_s = conn, opened_at, max_age_s  # max_age_s: jittered


class ConnectionPool:
    """Idle autocommit connections, per connection settings, for the tasks of one process."""

    def __init__(self, max_idle: int = MAX_IDLE, clock: Callable[[], float] = time.monotonic,
                 opener: Callable[[ConnectionSettings], psycopg.Connection] | None = None,
                 reap_every_s: float = REAP_EVERY_S, jitter: Callable[[], float] = random.random):
        if max_idle < 0:
            raise ValueError("max_idle must not be negative")
        self.max_idle, self._clock, self.reap_every_s, self._jitter = max_idle, clock, reap_every_s, jitter
        self._reaper: threading.Thread | None = None
        self._open = opener or (lambda settings: connect(settings, autocommit=True))
        self._lock = threading.Lock()
        self._idle: dict[str, deque[_Idle]] = {}
        # connection -> (when it was opened, its share of max_age_s in [0.9, 1]); weak: a connection
        # closed elsewhere just drops out
        self._opened_at: weakref.WeakKeyDictionary[psycopg.Connection, tuple[float, float]] = \
            weakref.WeakKeyDictionary()
        self._salt = os.urandom(16)
        self._counts = dict.fromkeys(("opened", "reused", "closed_dead", "closed_old", "closed_full",
                                      "closed_failed"), 0)

    def __repr__(self) -> str:
        return f"ConnectionPool(max_idle={self.max_idle}, {self.stats()})"

    # -- keys ------------------------------------------------------------------------------
    def key(self, settings: ConnectionSettings) -> str | None:
        """A keyed hash of every setting (password and provider included); ``None``: not poolable.

        The hash key is random per process, so the result means nothing outside it.
        """
        try:
            data = pickle.dumps(settings, protocol=5)
        except Exception:  # a password_provider stdlib pickle cannot take (a lambda): Spark's cloudpickle can
            try:
                from pyspark import cloudpickle
                data = cloudpickle.dumps(settings, protocol=5)
            except Exception:
                return None
        return hmac.new(self._salt, data, hashlib.sha256).hexdigest()[:32]

    # -- take / give back --------------------------------------------------------------------
    def connect(self, settings: ConnectionSettings, max_age_s: float = MAX_AGE_S) -> psycopg.Connection:
        """A validated idle connection for ``settings``, else a new one (autocommit)."""
        conn = self.take(settings, max_age_s)
        if conn is not None:
            return conn
        conn = self._open(settings)
        share = 1.0 - AGE_JITTER * min(max(self._jitter(), 0.0), 1.0)
        with self._lock:
            self._counts["opened"] += 1
            self._opened_at[conn] = (self._clock(), share)
        return conn

    def age_limit(self, conn: psycopg.Connection, max_age_s: float) -> float | None:
        """Seconds ``conn`` may live, ``max_age_s`` shortened by its own jitter; None if not the pool's."""
        opened = self._opened_at.get(conn)
        return None if opened is None else max_age_s * opened[1]

    def take(self, settings: ConnectionSettings, max_age_s: float = MAX_AGE_S) -> psycopg.Connection | None:
        """An idle connection that is young enough and answers, or ``None``; others met on the way are closed."""
        key = self.key(settings)
        if key is None or max_age_s <= 0:
            return None
        while True:
            with self._lock:
                queue = self._idle.get(key)
                item = queue.popleft() if queue else None
            if item is None:
                return None
            limit = self.age_limit(item.conn, max_age_s)
            if self._clock() - item.opened_at > (item.max_age_s if limit is None else min(limit, item.max_age_s)):
                self._drop(item.conn, "closed_old")
            elif not alive(item.conn):
                self._drop(item.conn, "closed_dead")
            else:
                with self._lock:
                    self._counts["reused"] += 1
                return item.conn

    def give_back(self, settings: ConnectionSettings, conn: psycopg.Connection | None,
                  max_age_s: float = MAX_AGE_S) -> None:
        """Keep a healthy connection of a task that ended well; close it when old, broken or over the bound."""
        if conn is None:
            return
        key = self.key(settings)
        opened = self._opened_at.get(conn)
        if key is None or opened is None or max_age_s <= 0 or conn.closed:
            self._drop(conn, None)
            return
        opened_at, limit = opened[0], max_age_s * opened[1]
        if self._clock() - opened_at > limit:
            self._drop(conn, "closed_old")
            return
        try:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                conn.rollback()
        except Exception:
            self._drop(conn, "closed_dead")
            return
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            self._drop(conn, "closed_dead")
            return
        with self._lock:
            queue = self._idle.setdefault(key, deque())
            if len(queue) < self.max_idle:
                queue.appendleft(_Idle(conn, opened_at, limit))  # most recently used first
                self._start_reaper()
                return
        self._drop(conn, "closed_full")

    def reap(self) -> int:
        """Close the idle connections past their maximum age; how many."""
        now = self._clock()
        with self._lock:
            old = [item for queue in self._idle.values() for item in queue if now - item.opened_at > item.max_age_s]
            for queue in self._idle.values():
                for item in old:
                    if item in queue:
                        queue.remove(item)
        for item in old:
            self._drop(item.conn, "closed_old")
        return len(old)

    def _start_reaper(self) -> None:  # called with the lock held
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(target=self._reap_forever, name="pg-pool-reaper", daemon=True)
            self._reaper.start()

    def _reap_forever(self) -> None:
        while True:
            time.sleep(self.reap_every_s)
            try:
                self.reap()
            except Exception:  # never let the sweep die on one bad close
                log.debug("pool sweep failed", exc_info=True)

    def discard(self, conn: psycopg.Connection | None) -> None:
        """Close a connection that must not be reused (its task failed)."""
        if conn is not None:
            self._drop(conn, "closed_failed")

    def _drop(self, conn: psycopg.Connection, why: str | None) -> None:
        with self._lock:
            self._opened_at.pop(conn, None)
            if why:
                self._counts[why] += 1
        try:
            conn.close()
        except Exception:  # closing a broken connection must not hide anything else
            log.debug("ignoring an error while closing a connection", exc_info=True)

    # -- whole pool -----------------------------------------------------------------------
    def close_all(self) -> None:
        """Close every idle connection (at process exit; tests)."""
        with self._lock:
            items = [item for queue in self._idle.values() for item in queue]
            self._idle.clear()
        for item in items:
            self._drop(item.conn, None)

    def forget_inherited(self) -> None:
        """In a forked child: drop, without closing, the parent's connections (closing would end its sessions)."""
        self._lock = threading.Lock()
        self._idle = {}
        self._opened_at = weakref.WeakKeyDictionary()
        self._reaper = None  # threads do not survive a fork

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(idle=sum(len(q) for q in self._idle.values()), **self._counts)


def alive(conn: psycopg.Connection, timeout_s: float = VALIDATE_TIMEOUT_S) -> bool:
    """True when ``conn`` is outside a transaction and answers ``SELECT 1`` within ``timeout_s``."""
    if conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    pgconn = conn.pgconn
    deadline = time.monotonic() + timeout_s
    try:
        pgconn.send_query(b"SELECT 1")
        while pgconn.flush():
            if not _wait(pgconn.socket, deadline, write=True):
                return False
        while True:
            pgconn.consume_input()
            if not pgconn.is_busy():
                break
            if not _wait(pgconn.socket, deadline):
                return False
        ok = True
        while (result := pgconn.get_result()) is not None:
            ok &= result.status == pq.ExecStatus.TUPLES_OK
        return ok and pgconn.status == pq.ConnStatus.OK
    except (psycopg.Error, OSError):
        return False


def _wait(sock: int, deadline: float, write: bool = False) -> bool:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return False
    ready = select.select([], [sock], [], remaining) if write else select.select([sock], [], [], remaining)
    return any(ready)


#: The pool of this process, shared by every writer task it runs.
POOL = ConnectionPool()
atexit.register(POOL.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.forget_inherited)

__all__ = ["AGE_JITTER", "MAX_AGE_S", "MAX_IDLE", "POOL", "REAP_EVERY_S", "ConnectionPool", "PoolStats", "alive"]
