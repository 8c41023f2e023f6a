"""Fail fast and tell the truth: a failed task stops its flush at once; a login that cannot work is not retried.

Modelled on psycopg's own failure-path tests: a real server, a real lock or a
stopped server, and a thread that would hang forever if the behaviour were
missing (the timeouts only catch that hang; nothing here measures speed).
"""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.postgres.connection import ConnectionSettings
from rtm_lakebase.sink import PostgresForeachWriter, SinkConnectionError, SinkSettings
from tests.sink.helpers import HANG, close_in_thread, make_table, table_rows, wait_lock_wait

pytestmark = pytest.mark.postgres


def writer(connection, table, **options):
    return PostgresForeachWriter(connection, SinkSettings(table=table, **options))


def test_close_with_an_error_cancels_a_flush_blocked_on_a_lock(pg_dsn, pg_conn, table_name, caplog):
    """The flush waits on a row lock that is never released; close(error) must not wait for it."""
    make_table(pg_conn, table_name)
    pg_conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 1, 'held')").format(sql.Identifier(table_name)))
    app = f"abort-{table_name}"
    heard: list[str] = []
    w = writer(ConnectionSettings.from_dsn(pg_dsn, application_name=app), table_name, max_batch_rows=1,
               max_dwell_ms=0, on_failure=heard.append)
    with psycopg.connect(pg_dsn) as holder:  # holds the row lock until the end of the test
        holder.execute(sql.SQL("SELECT * FROM {} WHERE id = 1 FOR UPDATE").format(sql.Identifier(table_name)))
        w.open(0, 0)
        w.process({"id": 1, "version": 2, "name": "new"})
        wait_lock_wait(pg_conn, app)
        with caplog.at_level(logging.INFO, logger="rtm_lakebase"):
            failure = close_in_thread(w, RuntimeError("executor lost"))
        holder.rollback()
    assert failure == []  # close(error) itself raises nothing; Spark raises the task's error
    assert table_rows(pg_conn, table_name) == [(1, 1, "held")]  # the abandoned flush wrote nothing
    assert len(heard) == 1 and "RuntimeError" in heard[0] and "executor lost" in heard[0]
    assert "abandoned" in heard[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # no "flush failed, the task fails with this error": the task failed first
    assert any("abandoned" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert w.metrics.retries == 0 and w.metrics.conflict_retries == 0


def test_close_with_an_error_ends_a_retry_backoff_at_once(pg_server):
    """The server is gone and the flush sleeps between reconnects (minutes here); close(error) ends the sleep."""
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, "t")
    w = writer(pg_server.dsn, "t", max_batch_rows=1, max_dwell_ms=0, max_retries=5,
               backoff_initial_ms=600_000, backoff_max_ms=600_000)  # each sleep ≥ 300 s
    w.open(0, 0)
    pg_server.stop(mode="immediate")
    w.process({"id": 1, "version": 1, "name": "a"})
    for _ in range(HANG * 10):  # the flush failed once and is now sleeping before its first retry
        if w.metrics.retries:
            break
        threading.Event().wait(0.1)
    assert w.metrics.retries == 1
    assert close_in_thread(w, RuntimeError("task killed")) == []
    assert w.metrics.retries == 1  # no retry after the abort


@pytest.mark.parametrize("change, says", [
    ({"sslmode": "require"}, "ssl"),                   # the local server has no TLS: refused, not retried
    ({"dbname": "no_such_database"}, "no_such_database"),
    ({"user": "no_such_role"}, "no_such_role"),
])
def test_a_login_that_cannot_work_fails_at_once(pg_dsn, change, says):
    settings = ConnectionSettings.from_dsn(pg_dsn, password="s3cret-never-shown", **change)
    w = writer(settings, "t", max_retries=5, backoff_initial_ms=60_000)  # a retry would sleep ≥ 30 s
    with pytest.raises(SinkConnectionError) as info:
        w.open(0, 0)
    assert w.metrics.retries == 0
    assert info.value.sqlstate is None  # libpq reports a refused login without one: the table matches its text
    assert says in str(info.value).lower() and "s3cret-never-shown" not in str(info.value)
