"""The main job: the end-to-end demo lands every distinct event exactly once."""

import pytest

from pack_lab import demo


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_demo_lands_each_distinct_event_once(spark, pg_dsn, pg_conn):
    options = demo.DemoOptions(rows=1500, rows_per_second=750, keys=50, duplicate_pct=10,
                               partitions=1, timeout_s=150)
    lines = []
    result = demo.run_demo(options, pg_dsn, log=lines.append)
    assert result.rows_sent == 1500
    assert result.duplicates_sent == 150
    assert result.distinct_sent == 1350
    assert result.rows_in_table == 1350
    assert (result.missing, result.unexpected) == (0, 0)
    assert result.ok
    assert result.latency["p50_ms"] >= 0
    assert any("in_table=" in line for line in lines), "progress lines were printed"
    # the demo drops its table unless asked to keep it
    leftover = pg_conn.execute(
        "select count(*) from pg_tables where tablename like 'rtm_demo_%'").fetchone()[0]
    assert leftover == 0
    assert "RESULT: OK" in demo.format_result(result)


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(["--rows", "0"])
    assert exit_info.value.code == 2
    assert "--rows must be at least 1" in capsys.readouterr().err


def test_mismatch_is_reported():
    result = demo.DemoResult(rows_sent=10, duplicates_sent=0, distinct_sent=10, rows_in_table=9,
                             missing=1, unexpected=0, seconds=1.0, latency={})
    assert not result.ok
    assert "RESULT: FAILED" in demo.format_result(result)


@pytest.mark.spark
def test_too_few_slots_in_the_running_session_fails_before_any_table(spark, pg_dsn, pg_conn):
    """The shared session has 4 slots; 3 source + 2 shuffle partitions need 5."""
    options = demo.DemoOptions(rows=10, partitions=3)
    with pytest.raises(RuntimeError, match="CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT|slot"):
        demo.run_demo(options, pg_dsn, log=lambda _line: None)
    leftover = pg_conn.execute(
        "select count(*) from pg_tables where tablename like 'rtm_demo_%'").fetchone()[0]
    assert leftover == 0
