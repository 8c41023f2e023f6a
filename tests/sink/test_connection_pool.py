"""The Python writer's per-process connection pool (rtm_lakebase/postgres/pool.py), without Spark.

A task that ends well hands its connection to the next task of the process; a
failed task's connection is closed; a pooled connection that died is found dead
before use and replaced; one past ``connection_max_age_s`` is closed instead of
reused; the pool keeps at most ``MAX_IDLE`` idle connections per target; it is
closed at process exit and a forked child does not touch its parent's; no key,
``repr`` or log line holds the password.
"""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from rtm_lakebase.postgres.connection import ConnectionSettings, Secret
from rtm_lakebase.postgres.pool import MAX_IDLE, POOL, ConnectionPool
from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkSettings
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres
ROOT = Path(__file__).resolve().parents[2]


def settings_for(pg_dsn: str, app: str | None = None) -> ConnectionSettings:
    return ConnectionSettings.from_dsn(pg_dsn, application_name=app or f"pool-{uuid.uuid4().hex[:8]}")


def backends(conn, app: str) -> list[int]:
    return sorted(r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchall())


def wait_backends(conn, app: str, want: int, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (found := backends(conn, app)) and len(found) != want or (not found and want):
        assert time.monotonic() < deadline, f"{len(found)} backends for {app}, want {want}"
        time.sleep(0.1)
    return found


def task(settings, table, rows, epoch, error=None, **options):
    """One foreach task: open, process, close; returns the backend pid it wrote through."""
    w = PostgresForeachWriter(settings, SinkSettings(table=table, max_dwell_ms=0, **options))
    w.open(0, epoch)
    pid = w._target.conn.info.backend_pid
    for r in rows:
        w.process(r)
    w.close(error)
    return pid


def rows(start, n=3):
    return [{"id": i, "version": 1, "name": f"n{i}"} for i in range(start, start + n)]


def test_a_task_that_ends_well_hands_its_connection_to_the_next(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    s = settings_for(pg_dsn)
    before = POOL.stats()
    pids = [task(s, table_name, rows(10 * e), e) for e in range(6)]
    after = POOL.stats()
    assert len(set(pids)) == 1, pids  # six epochs, one login
    assert after.opened - before.opened == 1 and after.reused - before.reused == 5
    assert backends(pg_conn, s.application_name) == pids[:1]  # kept, idle, for the next task
    assert len(table_rows(pg_conn, table_name)) == 18


def test_a_failed_tasks_connection_is_closed_not_kept(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    s = settings_for(pg_dsn)
    before = POOL.stats()
    task(s, table_name, rows(0), 0, error=RuntimeError("the task failed"))
    wait_backends(pg_conn, s.application_name, 0)
    # close() without error whose last flush fails (a bad row) closes it too
    with pytest.raises(BadRowError):
        task(s, table_name, [{"id": 1, "version": 1, "name": "x" * 50}], 1)
    wait_backends(pg_conn, s.application_name, 0)
    assert POOL.stats().closed_failed - before.closed_failed == 2
    assert POOL.take(s) is None


def test_a_pooled_connection_killed_meanwhile_is_replaced_and_no_row_is_lost(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    s = settings_for(pg_dsn)
    before = POOL.stats()
    first = task(s, table_name, rows(0), 0)
    pg_conn.execute("SELECT pg_terminate_backend(%s)", (first,))
    wait_backends(pg_conn, s.application_name, 0)
    second = task(s, table_name, rows(3), 1)
    assert second != first
    assert POOL.stats().closed_dead - before.closed_dead == 1
    assert [r[0] for r in table_rows(pg_conn, table_name)] == list(range(6))


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_connection_older_than_the_max_age_is_closed_not_reused(pg_dsn, pg_conn, table_name, monkeypatch):
    """The pool's own clock, moved by hand: no sleeping on the real clock."""
    from rtm_lakebase.sink import target

    make_table(pg_conn, table_name)
    clock = FakeClock()
    pool = ConnectionPool(clock=clock, jitter=lambda: 0.0)  # no jitter: the limit is exactly max_age_s
    monkeypatch.setattr(target, "POOL", pool)
    s = settings_for(pg_dsn)
    first = task(s, table_name, rows(0), 0, connection_max_age_s=60)
    clock.now += 59
    assert task(s, table_name, rows(3), 1, connection_max_age_s=60) == first  # young: reused
    clock.now += 2
    third = task(s, table_name, rows(6), 2, connection_max_age_s=60)
    assert third != first
    assert pool.stats().closed_old == 1
    assert backends(pg_conn, s.application_name) == [third]
    pool.close_all()
    # 0 switches reuse off: every task its own connection, closed at the end
    off = settings_for(pg_dsn)
    a, b = (task(off, table_name, rows(9 + 3 * e), e, connection_max_age_s=0) for e in range(2))
    assert a != b
    wait_backends(pg_conn, off.application_name, 0)


class _Conn:
    """Stands in for a psycopg connection the pool opened (weak-referenceable, never really used)."""

    closed = False

    def close(self):
        self.closed = True


def test_connection_ages_are_spread_so_a_query_does_not_log_in_again_all_at_once():
    """Each connection's limit is max_age_s shortened by its own 0-10 %, never longer."""
    draws = iter([0.0, 0.5, 0.999, 1.0])
    pool = ConnectionPool(clock=FakeClock(), opener=lambda _s: _Conn(), jitter=lambda: next(draws))
    s = ConnectionSettings(host="127.0.0.1", dbname="d")
    conns = [pool.connect(s, max_age_s=1000) for _ in range(4)]
    limits = [pool.age_limit(c, 1000) for c in conns]
    assert limits == pytest.approx([1000, 950, 900.1, 900])
    spread = ConnectionPool(clock=FakeClock(), opener=lambda _s: _Conn())  # the real random draws
    limits = {spread.age_limit(spread.connect(s, max_age_s=1800), 1800) for _ in range(50)}
    assert len(limits) > 40 and all(1620 <= x <= 1800 for x in limits)


def test_a_kept_connection_past_its_own_jittered_limit_is_closed_when_given_back():
    clock = FakeClock()
    pool = ConnectionPool(clock=clock, opener=lambda _s: _Conn(), jitter=lambda: 1.0)  # limit 0.9 × max age
    s = ConnectionSettings(host="127.0.0.1", dbname="d")
    conn = pool.connect(s, max_age_s=100)
    clock.now += 91
    pool.give_back(s, conn, max_age_s=100)
    assert conn.closed and pool.stats().closed_old == 1 and pool.stats().idle == 0


def test_an_idle_connection_past_its_age_is_closed_even_if_no_task_comes(pg_dsn, pg_conn):
    s = settings_for(pg_dsn)
    clock = FakeClock()
    pool = ConnectionPool(reap_every_s=0.2, clock=clock)
    conn = pool.connect(s, max_age_s=60)
    pool.give_back(s, conn, max_age_s=60)
    assert len(backends(pg_conn, s.application_name)) == 1
    clock.now += 61  # past its age on the pool's clock; the sweep (every 0.2 s) finds it
    wait_backends(pg_conn, s.application_name, 0)  # closed by the pool's sweep, no take() needed
    assert pool.stats().closed_old == 1 and pool.stats().idle == 0


def test_the_pool_keeps_at_most_max_idle_connections_per_target(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    s = settings_for(pg_dsn)
    before = POOL.stats()
    writers = [PostgresForeachWriter(s, SinkSettings(table=table_name)) for _ in range(MAX_IDLE + 2)]
    barrier = threading.Barrier(len(writers))

    def run(i, w):  # six tasks at once, in threads, as on one worker running several partitions
        w.open(i, 0)
        barrier.wait(30)
        w.process(rows(i, 1)[0])
        w.close(None)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(table_rows(pg_conn, table_name)) == MAX_IDLE + 2
    assert POOL.stats().closed_full - before.closed_full == 2
    assert len(wait_backends(pg_conn, s.application_name, MAX_IDLE)) == MAX_IDLE


def test_keys_repr_and_logs_hold_no_secret(pg_dsn, caplog):
    secret = "pool-secret-" + uuid.uuid4().hex
    s = ConnectionSettings.from_dsn(pg_dsn, password=Secret(secret))
    pool = ConnectionPool()
    key = pool.key(s)
    assert key == pool.key(pickle.loads(pickle.dumps(s)))  # the copy each task unpickles finds the pool
    assert key != pool.key(ConnectionSettings.from_dsn(pg_dsn, password=Secret(secret + "x")))
    assert key != ConnectionPool().key(s)  # keyed per process: means nothing elsewhere
    assert pool.key(ConnectionSettings.from_dsn(pg_dsn, password_provider=lambda: secret)) is not None
    with caplog.at_level(logging.DEBUG):
        conn = pool.connect(s)
        pool.give_back(s, conn)
        pool.close_all()
    for text in (key, repr(pool), str(pool.stats()), caplog.text):
        assert secret not in text


@pytest.mark.parametrize("how", ["exit", "os._exit"])
def test_closed_at_process_exit_and_a_forked_child_leaves_the_parents_alone(pg_dsn, pg_conn, how):
    """A normal exit closes the idle connection itself (``atexit``): a child holding a copy of its socket
    keeps the TCP connection open, so only a close by the process can end the session. Spark's daemon
    ends its workers with ``os._exit`` (no ``atexit``): there the kernel closes the socket and Postgres
    ends the session as well."""
    app = f"pool-exit-{uuid.uuid4().hex[:8]}"
    script = textwrap.dedent(f"""
        import os, subprocess, sys
        from rtm_lakebase.postgres.connection import ConnectionSettings
        from rtm_lakebase.postgres.pool import POOL
        s = ConnectionSettings.from_dsn({pg_dsn!r}, application_name={app!r})
        conn = POOL.connect(s)
        POOL.give_back(s, conn)
        child = os.fork()
        if child == 0:  # a forked child: the parent's idle connection is not its to use or close
            os._exit(0 if POOL.stats().idle == 0 and POOL.take(s) is None else 3)
        assert os.waitpid(child, 0)[1] == 0, "the forked child saw its parent's connection"
        again = POOL.take(s)
        assert again is conn, "the parent lost its connection to the child"
        POOL.give_back(s, again)
        print(conn.info.backend_pid, flush=True)
    """)
    if how == "exit":
        script += textwrap.dedent("""
            holder = subprocess.Popen(["sleep", "60"], pass_fds=(conn.pgconn.socket,), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(holder.pid, flush=True)
        """)
    else:
        script += "os._exit(0)\n"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    printed = [int(x) for x in run.stdout.split()]
    try:
        if how == "exit":
            assert Path(f"/proc/{printed[1]}").exists()  # the socket is still open in the holder ...
        wait_backends(pg_conn, app, 0)  # ... yet the session ended
    finally:
        if how == "exit":
            subprocess.run(["kill", str(printed[1])], check=False)
