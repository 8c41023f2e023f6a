"""A flush that fails for good fails the task within seconds, not at the end of the long batch.

Each query runs with ``realTime="5 minutes"``: a failure the query learns of within
``PROMPT`` seconds came from the failed flush, not from the batch end. The failing row
is the last one (a quiet stream), so nothing but the failure can wake the task.
"""

from __future__ import annotations

import functools
import os
import time
import uuid

import pytest
from psycopg import sql

from pack_lab import foreach_lab as lab
from pack_lab.rtm_lab import RealTimeMemorySource
from rtm_lakebase.foreach import start_foreach_query
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.jvm_sink.conftest import query_error, wait_until
from tests.sink.helpers import PidRecordingWriter, append_line, make_table, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow]

LONG_BATCH = {"realTime": "5 minutes"}
PROMPT = 60  # seconds: well inside the 300 s batch
SCHEMA = "id BIGINT, version BIGINT, name STRING"


def _sessions(conn, app: str) -> list[int]:
    return [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_failed_flush_fails_the_fast_query_within_seconds_naming_the_cause_and_loses_no_row(
        fast_spark, pg_dsn, pg_conn, table_name, tmp_path, checkpoint):
    make_table(pg_conn, table_name)
    app = f"ff-{uuid.uuid4().hex[:8]}"
    pid_file = tmp_path / "worker.pid"
    settings = SinkSettings(table=table_name, max_dwell_ms=20, max_retries=0)
    source = RealTimeMemorySource(fast_spark, SCHEMA, num_partitions=1)
    writer = PidRecordingWriter(PostgresForeachWriter(f"{pg_dsn} application_name={app}", settings), str(pid_file))
    query = start_foreach_query(source.dataframe(), writer, checkpoint_location=checkpoint, trigger=LONG_BATCH)
    try:
        source.add([{"id": 1, "version": 1, "name": "x"}])
        wait_until(lambda: table_rows(pg_conn, table_name) == [(1, 1, "x")], query, 120, "the first row")
        pg_conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table_name)))
        source.add([{"id": 2, "version": 1, "name": "y"}])  # the last row: the stream is quiet after it
        message = query_error(query, timeout=PROMPT)  # fails the test if the query still runs
    finally:
        query.stop()
    # The cause, from the flush: Postgres' error inside the writer's SinkError.
    assert f'relation "{table_name}" does not exist' in message and "SinkError" in message, message[-2000:]
    # ... as the task's error or the cause of the interrupt that failed it, not a suppressed afterthought.
    assert lab.reported_error(message) in (("error", "[PYTHON_EXCEPTION]"), ("cause", "[PYTHON_EXCEPTION]")), \
        message[:3000]
    # Nothing left running: the Python worker (and its flusher thread) ended, its connection is closed.
    worker_pid = int(pid_file.read_text())
    wait_until(lambda: _gone(worker_pid), None, 20, f"the Python worker {worker_pid} to exit")
    wait_until(lambda: not _sessions(pg_conn, app), None, 20, "the writer's Postgres session to close")
    # No row lost: the failed epoch was not committed, so a restart from the checkpoint replays both rows.
    make_table(pg_conn, table_name)
    query = start_foreach_query(source.dataframe(), PostgresForeachWriter(pg_dsn, settings),
                                checkpoint_location=checkpoint, trigger={"realTime": "5 seconds"})
    try:
        wait_until(lambda: table_rows(pg_conn, table_name) == [(1, 1, "x"), (2, 1, "y")], query, 120,
                   "both rows after the replay")
    finally:
        query.stop()


def test_a_flush_that_recovers_within_its_retries_does_not_fail_the_task(
        fast_spark, pg_dsn, pg_conn, table_name, checkpoint):
    make_table(pg_conn, table_name)
    app = f"ff-{uuid.uuid4().hex[:8]}"
    settings = SinkSettings(table=table_name, max_dwell_ms=20)  # default retry budget
    source = RealTimeMemorySource(fast_spark, SCHEMA, num_partitions=1)
    writer = PostgresForeachWriter(f"{pg_dsn} application_name={app}", settings)
    query = start_foreach_query(source.dataframe(), writer, checkpoint_location=checkpoint, trigger=LONG_BATCH)
    try:
        source.add([{"id": 1, "version": 1, "name": "x"}])
        wait_until(lambda: table_rows(pg_conn, table_name) == [(1, 1, "x")], query, 120, "the first row")
        (before,) = _sessions(pg_conn, app)
        pg_conn.execute("SELECT pg_terminate_backend(%s)", (before,))  # the next flush finds it gone
        source.add([{"id": 2, "version": 1, "name": "y"}])
        wait_until(lambda: len(table_rows(pg_conn, table_name)) == 2, query, 60, "the row after the reconnect")
        assert _sessions(pg_conn, app) not in ([], [before])  # it reconnected: a new session
        time.sleep(3)  # a failure would have failed the task by now (about a second on this path)
        assert query.isActive and query.exception() is None, query.exception()
        source.add([{"id": 3, "version": 1, "name": "z"}])
        wait_until(lambda: len(table_rows(pg_conn, table_name)) == 3, query, 60, "a row after that")
    finally:
        query.stop()


def test_stock_foreach_calls_on_failure_at_once_while_the_query_still_runs(
        spark, pg_dsn, pg_conn, table_name, tmp_path, checkpoint):
    """Stock foreach cannot be told before the batch ends; the writer's on_failure hook is told at once."""
    make_table(pg_conn, table_name)
    seen = tmp_path / "failures.txt"
    settings = SinkSettings(table=table_name, max_dwell_ms=20, max_retries=0,
                            on_failure=functools.partial(append_line, str(seen)))
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    query = (source.dataframe().writeStream.foreach(PostgresForeachWriter(pg_dsn, settings)).outputMode("update")
             .option("checkpointLocation", checkpoint).trigger(**LONG_BATCH).start())
    try:
        # Bursts big enough that stock foreach's batches (1, 2, 4... rows) pass its 64 KB send buffer
        # and reach the worker now, not at the batch end.
        source.add([{"id": i, "version": 1, "name": "n" * 15} for i in range(3000)])
        wait_until(lambda: table_rows(pg_conn, table_name), query, 120, "the first rows")
        pg_conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table_name)))
        source.add([{"id": i, "version": 2, "name": "n" * 15} for i in range(3000)])
        wait_until(seen.exists, query, PROMPT, "the on_failure hook")
        # The hook ran while the query still looks healthy: stock foreach reports it at the batch end.
        assert query.isActive and query.exception() is None
        lines = seen.read_text().splitlines()
        assert len(lines) == 1 and f'relation "{table_name}" does not exist' in lines[0], lines
    finally:
        query.stop()
