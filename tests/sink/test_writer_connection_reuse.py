"""The Python writer reuses its connection across micro-batches and epochs inside a reused Python worker.

Spark hands task after task of a query to the same Python worker processes
(``spark.python.worker.reuse``); each process keeps the connection its last
task gave back (rtm_lakebase/postgres/pool.py). Counted three ways: the
pools' own counters (recorded by each task), the sessions Postgres counted
for a database of the test's own (``pg_stat_database.sessions``), and the
backends ``pg_stat_activity`` showed for the query's ``application_name``.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from rtm_lakebase.postgres.connection import ConnectionSettings
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.sink.helpers import PoolRecordingWriter, make_table, pool_records

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
SCHEMA = "id BIGINT, version BIGINT, name STRING"


class Watch(threading.Thread):
    """Samples ``pg_stat_activity`` for one application_name: every pid seen and the most at once."""

    def __init__(self, dsn: str, app: str):
        super().__init__(daemon=True)
        self.dsn, self.app, self.pids, self.most = dsn, app, set(), 0
        self.halt = threading.Event()

    def run(self):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.halt.wait(0.1):
                pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                                   (self.app,)).fetchall()]
                self.pids.update(pids)
                self.most = max(self.most, len(pids))


@pytest.fixture
def own_database(pg_dsn, pg_conn):
    """A database only this test's writer logs into, so Postgres' session count is the writer's logins."""
    name = f"reuse_{uuid.uuid4().hex[:8]}"
    try:
        pg_conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        pytest.skip(f"cannot create a database on this server: {type(exc).__name__}")
    yield name
    pg_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def logins(pg_conn, database: str, app: str) -> int:
    """Sessions Postgres counted for ``database``, once every writer session has ended (stats flushed at exit)."""
    pg_conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
    deadline = time.monotonic() + 30
    while pg_conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)).fetchone()[0]:
        assert time.monotonic() < deadline, "sessions of the test database did not end"
        time.sleep(0.2)
    pg_conn.execute("SELECT pg_stat_clear_snapshot()")
    return pg_conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", (database,)).fetchone()[0]


def run_query(spark, pg_dsn, pg_conn, database, checkpoint, tmp_path, trigger, batches, kill_after=None):
    app = f"py-reuse-{uuid.uuid4().hex[:6]}"
    settings = ConnectionSettings.from_dsn(pg_dsn, dbname=database, application_name=app)
    record = str(tmp_path / "tasks.jsonl")
    # one session of the test's own in the database, for the table and the row counts
    with psycopg.connect(**{**settings.connect_kwargs(), "application_name": "reuse-test"}, autocommit=True) as db:
        make_table(db, "events")
        source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
        writer = PoolRecordingWriter(PostgresForeachWriter(settings, SinkSettings(table="events", max_dwell_ms=20)),
                                     record)
        watch = Watch(pg_dsn, app)
        watch.start()
        query = source.dataframe().writeStream.foreach(writer).outputMode("update").option(
            "checkpointLocation", checkpoint).trigger(**trigger).start()
        try:
            for batch in range(batches):
                source.add([{"id": batch * 10 + i, "version": 1, "name": "x"} for i in range(10)])
                deadline = time.monotonic() + 90
                while db.execute("SELECT count(*) FROM events").fetchone()[0] < (batch + 1) * 10:
                    assert query.isActive, query.exception()
                    assert time.monotonic() < deadline, f"batch {batch} not written"
                    time.sleep(0.1)
                if "realTime" in trigger:  # the next rows in a later epoch: wait for one to start
                    epoch = max((r["epoch"] for r in pool_records(record)), default=-1)
                    while max((r["epoch"] for r in pool_records(record)), default=-1) <= epoch:
                        assert time.monotonic() < deadline + 60, "no epoch ended"
                        time.sleep(0.2)
                if batch == kill_after:  # kill the pooled connections between batches: replaced, not used
                    db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                               (app,))
        finally:
            query.stop()
            watch.halt.set()
            watch.join(10)
        written = db.execute("SELECT count(*), count(DISTINCT id) FROM events").fetchone()
    return app, pool_records(record), watch, written


def check(records, watch, sessions, written, batches):
    tasks = [r for r in records if not r["error"]]
    first, last = {}, {}  # each worker process's first and last task of this query
    for r in records:
        first.setdefault(r["pid"], r)
        last[r["pid"]] = r

    def did(counter):  # what this query's tasks made the pools do, over every worker process
        return sum(last[pid][counter] - first[pid]["before"][counter] for pid in last)

    opened, reused = did("opened"), did("reused")
    print(f"tasks={len(tasks)} workers={len(last)} opened={opened} reused={reused} closed_dead="
          f"{did('closed_dead')} pg_sessions={sessions} pids_seen={len(watch.pids)} most_at_once={watch.most}")
    assert written == (batches * 10, batches * 10)  # every row, once
    assert sessions == opened + 1  # Postgres counted each login the pools made (+ the test's own session)
    assert len(watch.pids) <= opened
    assert watch.most <= len(last)  # at most one connection per Python worker, idle or in use
    return tasks, last, opened, reused


def did_closed_dead(records) -> int:
    first, last = {}, {}
    for r in records:
        first.setdefault(r["pid"], r)
        last[r["pid"]] = r
    return sum(last[pid]["closed_dead"] - first[pid]["before"]["closed_dead"] for pid in last)


def test_micro_batches_reuse_the_workers_connections_and_replace_a_killed_one(
        spark, pg_dsn, pg_conn, own_database, checkpoint, tmp_path):
    batches = 6
    app, records, watch, written = run_query(spark, pg_dsn, pg_conn, own_database, checkpoint, tmp_path,
                                             {"processingTime": "0 seconds"}, batches, kill_after=2)
    sessions = logins(pg_conn, own_database, app)
    tasks, last, opened, reused = check(records, watch, sessions, written, batches)
    assert len(tasks) >= batches
    # At most one login per Python worker process, plus one per worker whose pooled connection was killed;
    # every other task took the connection its worker kept.
    assert opened <= 2 * len(last) and opened < len(tasks)
    assert reused >= len(tasks) - opened
    assert did_closed_dead(records) >= 1  # the killed one was found dead and replaced


@pytest.mark.slow
def test_real_time_epochs_reuse_the_workers_connection(spark, pg_dsn, pg_conn, own_database, checkpoint, tmp_path):
    epochs = 4
    app, records, watch, written = run_query(spark, pg_dsn, pg_conn, own_database, checkpoint, tmp_path,
                                             {"realTime": MIN_REAL_TIME_TRIGGER}, epochs)
    sessions = logins(pg_conn, own_database, app)
    tasks, last, opened, reused = check(records, watch, sessions, written, epochs)
    assert len({r["epoch"] for r in tasks}) >= epochs  # one task per long batch
    assert opened <= len(last) and opened < len(tasks)  # one login per Python worker, not per epoch
    assert reused >= len(tasks) - opened
