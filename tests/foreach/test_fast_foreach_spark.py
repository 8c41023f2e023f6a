"""The fast foreach path end to end on the pinned PySpark: delivery, errors, worker crash, restart.

Where the claim is "same as stock foreach", the test runs the same scenario
through both paths (``pack_lab/foreach_lab.py``) and asserts the same outcome.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from pack_lab import foreach_lab as lab
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from rtm_lakebase.foreach import FastForeachUnavailable, start_foreach_query
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.sink.helpers import CrashingWriter, make_table, table_rows

pytestmark = [pytest.mark.spark]


def test_a_slow_stream_reaches_process_row_by_row_inside_one_epoch(fast_spark, tmp_path):
    """Each row is added only after the previous one reached process(): all in one epoch, so
    rows are handed over as they come, not when the long batch ends (stock foreach holds them)."""
    result = lab.deliver_all(fast_spark, "fast", str(tmp_path), [1], trickle=3,
                             trigger={"realTime": "60 seconds"})
    assert result["ids"] == list(range(4))
    assert len(set(result["trickle_epochs"])) == 1, result["trickle_epochs"]


@pytest.mark.parametrize("caps", [{}, {"worker_batch_rows": 7}, {"worker_batch_rows": 1}, {"worker_batch_bytes": 1}],
                         ids=["defaults", "rows7", "rows1", "bytes1"])
def test_no_row_is_dropped_or_sent_twice(fast_spark, tmp_path, caps):
    """Bursts and single rows, under each batch cap: every row reaches process() exactly once."""
    result = lab.deliver_all(fast_spark, "fast", str(tmp_path), [1, 700, 1, 2500, 2], **caps)
    assert result["ids"] == list(range(result["sent"]))
    assert set(result["epoch_duplicates"].values()) == {0}


def test_micro_batch_trigger_delivers_every_row_once(fast_spark, tmp_path):
    result = lab.deliver_all(fast_spark, "fast", str(tmp_path), [1, 400, 3],
                             trigger={"processingTime": "0 seconds"}, worker_batch_rows=50)
    assert result["ids"] == list(range(result["sent"]))


def test_a_function_writer_works_as_with_stock_foreach(fast_spark, tmp_path):
    out = tmp_path / "seen.txt"

    def write(row):
        with open(out, "a", encoding="utf-8") as f:
            f.write(f"{row.id}\n")

    source = RealTimeMemorySource(fast_spark, lab.SCHEMA, num_partitions=1)
    query = start_foreach_query(source.dataframe(), write, checkpoint_location=str(tmp_path / "ck"),
                                trigger={"realTime": MIN_REAL_TIME_TRIGGER})
    try:
        source.add([{"id": i} for i in range(50)])
        deadline = time.monotonic() + 60
        while not out.exists() or len(out.read_text().split()) < 50:
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline, "rows did not arrive"
            time.sleep(0.1)
    finally:
        query.stop()
    assert sorted(map(int, out.read_text().split())) == list(range(50))


@pytest.mark.parametrize("path", lab.PATHS)
def test_an_exception_in_process_fails_the_task_and_reaches_close(fast_spark, tmp_path, path):
    """Same on both paths: close(error) gets the exception, the query dies with it, no row after it."""
    result = lab.failing_query(fast_spark, path, str(tmp_path), raise_on=7)
    assert result["query_error"] and "boom on row 7" in result["query_error"]
    # The task's error is the worker's, or (fast path, its interrupt broke the source's wait) caused by it:
    # never the interrupt with the worker's error merely suppressed.
    assert lab.reported_error(result["query_error"]) in (
        ("error", "[PYTHON_EXCEPTION]"), ("cause", "[PYTHON_EXCEPTION]")), result["query_error"][:3000]
    assert len(result["close_errors"]) == 1 and "ValueError('boom on row 7')" in result["close_errors"][0]
    assert result["rows_seen"] == list(range(8))


@pytest.mark.parametrize("path", lab.PATHS)
def test_a_killed_python_worker_fails_the_task(fast_spark, tmp_path, path):
    """Same on both paths: the worker dies in process(), the query fails saying so, close never runs."""
    result = lab.failing_query(fast_spark, path, str(tmp_path), kill_on=5)
    assert result["query_error"], "the query did not fail"
    assert "Python worker exited unexpectedly" in result["query_error"], result["query_error"][:500]
    assert lab.reported_error(result["query_error"]) in (
        ("error", "Python worker exited unexpectedly"), ("cause", "Python worker exited unexpectedly")), \
        result["query_error"][:3000]
    assert result["close_errors"] == []
    assert result["rows_seen"] == list(range(6))


@pytest.mark.parametrize("path", lab.PATHS)
def test_stopping_the_query_mid_batch_ends_it_without_an_error(fast_spark, tmp_path, path):
    """query.stop() interrupts the task while it waits in the source; the worker then ends too. The fast
    path's fail-fast watcher must not turn that into a failure: the query ends with no exception."""
    import os
    import tempfile

    folder = tempfile.mkdtemp(dir=str(tmp_path))
    source = RealTimeMemorySource(fast_spark, lab.SCHEMA, num_partitions=1)
    query = lab.start(path, source.dataframe(), lab.RecordingWriter(folder), os.path.join(str(tmp_path), "ck"),
                      trigger={"realTime": "5 minutes"})
    try:
        source.add([{"id": i} for i in range(3)])
        if path == "fast":  # stock foreach holds the rows until the batch ends
            lab._wait(lambda: len(lab._seen_ids(folder)) == 3, query, 60, "3 rows")
        else:
            time.sleep(2)
    finally:
        query.stop()
    assert not query.isActive
    assert query.exception() is None, query.exception()
    time.sleep(2)  # anything the stop set off in the writer has happened by now
    assert query.exception() is None
    errors = [e["error"] for e in lab.read_events(folder) if e["event"] == "close"]
    assert all(error is None for error in errors), errors


def test_the_writer_class_missing_from_the_session_is_one_line(fast_spark, monkeypatch):
    import rtm_lakebase.foreach as ff

    monkeypatch.setattr(ff, "WRITER_CLASS", "rtm_lakebase.foreach.NotThere")
    df = fast_spark.range(1)
    with pytest.raises(FastForeachUnavailable) as info:
        ff.build_jvm_writer(df, print)
    assert "\n" not in str(info.value)
    assert "is not on the session's classpath" in str(info.value) and "spark.jars" in str(info.value)


SCHEMA = "id BIGINT, version BIGINT, name STRING"


def _events(n_keys: int, versions: int) -> list[dict]:
    out = [{"id": k, "version": v, "name": f"k{k}-v{v}"} for v in range(1, versions + 1) for k in range(n_keys)]
    out.extend({"id": k, "version": 1, "name": "stale replay"} for k in range(0, n_keys, 3))
    return out


def _wait_for_table(conn, table, want, query, timeout=120.0):
    deadline = time.monotonic() + timeout
    while (got := table_rows(conn, table)) != want:
        assert query.isActive, f"query stopped with {len(got)} rows: {query.exception()}"
        assert time.monotonic() < deadline, f"table has {len(got)} rows, want {len(want)}"
        time.sleep(0.3)


@pytest.mark.postgres
@pytest.mark.slow
def test_restart_from_checkpoint_replays_and_the_pack_writer_keeps_the_table_exact(
        fast_spark, pg_dsn, pg_conn, table_name, tmp_path, checkpoint):
    """Crash mid-epoch after some flushes committed; restart from the checkpoint: replayed rows
    are upserted again and the table ends exactly right (0 lost, 0 duplicated, newest version wins)."""
    make_table(pg_conn, table_name)
    settings = SinkSettings(table=table_name, version_column="version", max_batch_rows=50, max_dwell_ms=0)
    marker = tmp_path / "crash-once"
    marker.write_text("x")
    source = RealTimeMemorySource(fast_spark, SCHEMA, num_partitions=1)
    rows = _events(200, 3)
    crashing = CrashingWriter(PostgresForeachWriter(pg_dsn, settings), str(marker), crash_after=330)
    query = start_foreach_query(source.dataframe(), crashing, checkpoint_location=checkpoint,
                                trigger={"realTime": MIN_REAL_TIME_TRIGGER})
    try:
        source.add(rows)
        with pytest.raises(Exception, match="simulated executor crash"):
            query.awaitTermination(120)
    finally:
        query.stop()
    partial = table_rows(pg_conn, table_name)
    want = [(k, 3, f"k{k}-v3") for k in range(200)]
    assert 0 < len(partial) and partial != want  # some flushes were committed before the crash
    query = start_foreach_query(source.dataframe(), PostgresForeachWriter(pg_dsn, settings),
                                checkpoint_location=checkpoint, trigger={"realTime": MIN_REAL_TIME_TRIGGER})
    try:
        _wait_for_table(pg_conn, table_name, want, query)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert conn.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()[0] == 200
    finally:
        query.stop()

