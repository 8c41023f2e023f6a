"""Fail fast and tell the truth, JVM side: a failed task stops its flush at once; a login that cannot work is not retried.

The twin of tests/sink/test_writer_fail_fast.py for the JVM sink
(rtm_lakebase/jvm/Flusher.java, Target.java): a real server, a real lock or a
stopped server, and a thread that would hang if the behaviour were missing (the
timeouts only catch that hang; nothing here measures speed).
"""

from __future__ import annotations

import re
import threading

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.jvm import build_jvm_writer
from rtm_lakebase.postgres.connection import ConnectionSettings
from tests.jvm_sink.jvm_rows import java_row
from tests.sink.helpers import HANG, close_in_thread, lock_waits, make_table, table_rows, wait_lock_wait

pytestmark = [pytest.mark.spark, pytest.mark.postgres]
DDL = "id BIGINT, version BIGINT, name STRING"


def retries(writer) -> int:
    return int(re.search(r"\bretries=(\d+)", writer.metrics()).group(1))


def test_close_with_an_error_cancels_a_flush_blocked_on_a_lock(jvm_spark, pg_dsn, pg_conn, table_name):
    """The flush waits on a row lock that is never released; close(error) must not wait for it."""
    make_table(pg_conn, table_name)
    pg_conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 1, 'held')").format(sql.Identifier(table_name)))
    app = f"jvm-abort-{table_name}"
    writer = build_jvm_writer(jvm_spark, dsn=f"{pg_dsn} application_name={app}", table=table_name,
                              max_batch_rows=1, max_dwell_ms=0)
    with psycopg.connect(pg_dsn) as holder:  # holds the row lock until the end of the test
        holder.execute(sql.SQL("SELECT * FROM {} WHERE id = 1 FOR UPDATE").format(sql.Identifier(table_name)))
        writer.open(0, 0)
        writer.process(java_row(jvm_spark, DDL, [1, 2, "new"]))
        wait_lock_wait(pg_conn, app)
        failure = close_in_thread(writer, jvm_spark.sparkContext._jvm.java.lang.RuntimeException("executor lost"))
        # The lock is still held: only a cancelled statement lets the sink's backend stop waiting.
        assert lock_waits(pg_conn, app) == 0
        holder.rollback()
    assert failure == []  # close(error) itself raises nothing; Spark raises the task's error
    assert table_rows(pg_conn, table_name) == [(1, 1, "held")]  # the abandoned flush wrote nothing
    assert retries(writer) == 0


def test_close_with_an_error_ends_a_retry_backoff_at_once(jvm_spark, pg_server):
    """The server is gone and the flush sleeps between reconnects (minutes here); close(error) ends the sleep."""
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, "t")
    writer = build_jvm_writer(jvm_spark, dsn=pg_server.dsn, table="t", max_batch_rows=1, max_dwell_ms=0,
                              max_retries=5, backoff_initial_ms=600_000, backoff_max_ms=600_000,
                              connection_max_age_s=0)  # each sleep ≥ 300 s
    writer.open(0, 0)
    pg_server.stop(mode="immediate")
    writer.process(java_row(jvm_spark, DDL, [1, 1, "a"]))
    for _ in range(HANG * 10):  # the flush failed once and is now sleeping before its first retry
        if retries(writer):
            break
        threading.Event().wait(0.1)
    assert retries(writer) == 1
    assert close_in_thread(writer, jvm_spark.sparkContext._jvm.java.lang.RuntimeException("task killed")) == []
    assert retries(writer) == 1  # no retry after the abort


@pytest.mark.parametrize("change, says", [
    ({"sslmode": "require"}, "ssl"),                   # the local server has no TLS: refused, not retried
    ({"dbname": "no_such_database"}, "no_such_database"),
    ({"user": "no_such_role"}, "no_such_role"),
])
def test_a_login_that_cannot_work_fails_at_once(jvm_spark, pg_dsn, change, says):
    settings = ConnectionSettings.from_dsn(pg_dsn, password="s3cret-never-shown", **change)
    writer = build_jvm_writer(jvm_spark, dsn=settings, table="t", max_retries=5,
                              backoff_initial_ms=60_000)  # a retry would sleep ≥ 30 s
    with pytest.raises(Exception) as info:  # Py4JJavaError carrying PostgresSinkException
        writer.open(0, 0)
    message = str(info.value).lower()
    assert "postgressinkexception: cannot connect to postgres" in message, message[:2000]
    assert says in message and "s3cret-never-shown" not in message
    assert retries(writer) == 0
