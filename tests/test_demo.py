"""The main job: the demo lands each distinct event once, refuses bad input in one line,
and leaves nothing behind on any exit path (Ctrl-C and SIGTERM included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pack_lab import demo
from pack_lab.demo_options import RANGES, DemoOptions, OptionError, parse_trigger
from pack_lab.interrupts import Interrupted, interrupts_raise, shielded

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cret-Pa55-word"


def demo_tables(conn) -> list[str]:
    return [r[0] for r in conn.execute(
        "select tablename from pg_tables where tablename like 'rtm\\_demo\\_%'").fetchall()]


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Fail the test if the demo starts Postgres, Spark or a connection."""
    import pack_lab.local_postgres as local_postgres
    import pack_lab.rtm_lab as rtm_lab

    def forbidden(*_args, **_kwargs):
        raise AssertionError("the demo started something before refusing its input")

    monkeypatch.setattr(local_postgres, "postgres_dsn", forbidden)
    monkeypatch.setattr(rtm_lab, "build_session", forbidden)
    monkeypatch.setattr(demo, "run_demo", forbidden)


# --------------------------------------------------------------------- flags

#: Values every numeric flag must refuse, plus each flag's own out-of-range values.
COMMON_BAD = ["nan", "NaN", "inf", "-inf", "-1", "abc", "", "1e999", "0x10"]
OUT_OF_RANGE = {flag: [str(spec.lo - 1), str(spec.hi * 10)] for flag, spec in RANGES.items()}
INTEGER_ONLY = [flag for flag, spec in RANGES.items() if spec.integer]
BAD_FLAG_VALUES = sorted({(flag, value) for flag in RANGES
                          for value in COMMON_BAD + OUT_OF_RANGE[flag]
                          if not (flag == "--seed" and value in ("0x10",))}
                         | {(flag, "2.5") for flag in INTEGER_ONLY}
                         | {("--duplicate-pct", "100"), ("--rate", "0"), ("--partitions", "0")})


@pytest.mark.parametrize(("flag", "value"), BAD_FLAG_VALUES)
def test_every_numeric_flag_refuses_bad_values_in_one_line(flag, value, capsys, nothing_may_start):
    with pytest.raises(SystemExit) as exit_info:
        demo.main([f"{flag}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert flag in err and "from" in err and "to" in err, err  # names the flag and its range
    assert "Traceback" not in err


BAD_TRIGGERS = ["4 seconds", "0 seconds", "-5 seconds", "5", "abc", "nan seconds", "inf seconds",
                "5 parsecs", "2 hours", "1.5 seconds", "", "5 seconds; drop table x", "99999999 seconds"]


@pytest.mark.parametrize("value", BAD_TRIGGERS)
def test_trigger_must_parse_and_be_at_least_5_seconds(value, capsys, nothing_may_start):
    with pytest.raises(SystemExit) as exit_info:
        demo.main([f"--trigger={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--trigger" in err and "5 seconds" in err, err


@pytest.mark.parametrize(("text", "spark_form"), [
    ("5 seconds", "5 seconds"), ("10 s", "10 seconds"), ("1 minute", "60 seconds"),
    ("2 MINUTES", "120 seconds"), ("1 hour", "3600 seconds"), ("30sec", "30 seconds")])
def test_trigger_forms_are_normalised_for_spark(text, spark_form):
    assert parse_trigger(text) == spark_form


def test_a_timeout_shorter_than_the_trigger_is_refused_for_the_python_rtm_path(capsys, nothing_may_start):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(["--trigger", "10 minutes", "--timeout", "120"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--timeout must be at least 615 seconds" in err, err
    assert DemoOptions(trigger="10 minutes", timeout_s=120, paths=("rtm-jvm",)).timeout_s == 120


@pytest.mark.parametrize("argv", [["--path", "kafka"], ["--pipeline", "magic"], ["--no-such-flag"],
                                  ["positional"], ["--output-dir", ""]])
def test_other_bad_command_lines_are_one_line(argv, capsys, nothing_may_start):
    with pytest.raises(SystemExit) as exit_info:
        demo.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(("field", "value"), [
    ("rows", 0), ("rows_per_second", float("nan")), ("rows_per_second", float("inf")),
    ("keys", -1), ("duplicate_pct", float("nan")), ("duplicate_pct", 100.0), ("partitions", 0),
    ("max_batch_rows", 0), ("max_dwell_ms", -5), ("timeout_s", float("-inf")), ("rows", 2.5),
    ("rows", True), ("trigger", "1 second"), ("paths", ("rtm-kafka",)), ("paths", ())])
def test_options_object_checks_the_same_ranges(field, value):
    with pytest.raises(OptionError):
        DemoOptions(**{field: value})


def test_defaults_are_valid_and_take_about_two_minutes():
    options = DemoOptions()
    feed_s = options.rows / options.rows_per_second * len(options.paths)
    assert 40 <= feed_s <= 90, feed_s  # plus start-up and drains: about two minutes in all
    assert options.paths == ("rtm-jvm", "rtm-fast-foreach", "rtm-python", "microbatch")


# --------------------------------------------------------------------- PG_DSN


def refused_dsn() -> str:
    from pack_lab.local_postgres import free_port

    return f"host=127.0.0.1 port={free_port()} user=me dbname=db password={SECRET} connect_timeout=3"


BAD_DSNS = {
    "unparsable, unquoted space in the password": f"host=127.0.0.1 password={SECRET} more words",
    "unparsable, unterminated quote": f"host=127.0.0.1 password='{SECRET}",
    "unparsable URL": f"postgresql://me:{SECRET}@[::1:5432/db",
    "unknown parameter": f"host=127.0.0.1 password={SECRET} bogus_parameter=1",
    "unknown host": f"host=no-such-host.invalid port=5432 user=me password={SECRET} connect_timeout=3",
    "non-numeric timeout": f"host=127.0.0.1 password={SECRET} connect_timeout=soon",
}


def run_main_expecting_env_error(monkeypatch, capsys, dsn: str) -> str:
    import pack_lab.rtm_lab as rtm_lab

    monkeypatch.setenv("PG_DSN", dsn)
    monkeypatch.setattr(rtm_lab, "build_session", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError("Spark started before the DSN was checked")))
    code = demo.main(["--rows", "10"])
    captured = capsys.readouterr()
    assert code == 2, captured
    err = captured.err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and SECRET not in err and SECRET not in captured.out, err
    assert dsn not in err
    return err


@pytest.mark.parametrize("case", sorted(BAD_DSNS))
def test_bad_pg_dsn_is_one_line_without_the_secret(case, monkeypatch, capsys):
    err = run_main_expecting_env_error(monkeypatch, capsys, BAD_DSNS[case])
    assert "PG_DSN" in err


def test_refused_port_is_named(monkeypatch, capsys):
    err = run_main_expecting_env_error(monkeypatch, capsys, refused_dsn())
    assert "connection refused" in err


@pytest.mark.postgres
@pytest.mark.parametrize(("change", "expected"), [
    ({"user": "no_such_role_x"}, "user does not exist"),
    ({"dbname": "no_such_database_x"}, "database does not exist"),
])
def test_unknown_role_or_database_is_named(pg_dsn, change, expected, monkeypatch, capsys):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    parts = {**conninfo_to_dict(pg_dsn), **change, "password": SECRET}
    err = run_main_expecting_env_error(monkeypatch, capsys, make_conninfo(**parts))
    assert expected in err


@pytest.mark.postgres
def test_a_user_who_cannot_create_tables_is_told_before_spark_starts(pg_server, monkeypatch, capsys):
    import psycopg

    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:  # a private server: no one else's rights change
        conn.execute("CREATE ROLE demo_no_create LOGIN")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        dsn = f"host=127.0.0.1 port={pg_server.port} dbname=postgres user=demo_no_create password={SECRET}"
        err = run_main_expecting_env_error(monkeypatch, capsys, dsn)
        assert "cannot create a table" in err and "42501" in err
        assert not demo_tables(conn)


@pytest.mark.postgres
def test_wrong_password_is_named_without_either_password(pg_server, monkeypatch, capsys):
    import psycopg

    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE demo_pw LOGIN PASSWORD 'the-right-one-42'")
        (pg_server.data_dir / "pg_hba.conf").write_text(
            "local all all trust\nhost all postgres 127.0.0.1/32 trust\n"
            "host all all 127.0.0.1/32 scram-sha-256\n")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)
    dsn = f"host=127.0.0.1 port={pg_server.port} user=demo_pw dbname=postgres password={SECRET}"
    err = run_main_expecting_env_error(monkeypatch, capsys, dsn)
    assert "authentication failed" in err and "the-right-one-42" not in err


def test_command_line_errors_have_no_traceback_from_the_real_entry_point(tmp_path):
    """Through ``python -m pack_lab.demo``: a bad flag and a bad DSN, one line each, exit 2."""
    env = dict(os.environ, PG_DSN=BAD_DSNS["unparsable, unquoted space in the password"],
               PYTHONPATH=str(ROOT))
    for argv in (["--rate", "nan"], ["--rows", "100"]):
        proc = subprocess.run([sys.executable, "-m", "pack_lab.demo", *argv], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr and SECRET not in proc.stderr + proc.stdout
        assert not (tmp_path / "demo-output").exists()


# --------------------------------------------------------------------- signals


def test_sigterm_becomes_an_exception_that_cleanup_can_see():
    cleaned = []
    with pytest.raises(Interrupted) as info:
        with interrupts_raise():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                cleaned.append(True)
    assert cleaned == [True]
    assert info.value.exit_code == 128 + signal.SIGTERM


def test_a_signal_during_cleanup_waits_for_the_cleanup():
    steps = []
    with pytest.raises(Interrupted) as info:
        with interrupts_raise():
            with shielded():
                os.kill(os.getpid(), signal.SIGINT)
                steps.append("first")
                time.sleep(0.05)
                steps.append("second")
    assert steps == ["first", "second"]
    assert info.value.signum == signal.SIGINT


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_run_leaves_no_table_and_no_checkpoint(signum, pg_dsn, pg_conn, tmp_path):
    """A real run, stopped while rows flow: exit 128+N, its table dropped, its checkpoint gone."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    before = set(demo_tables(pg_conn))
    env = dict(os.environ, PG_DSN=pg_dsn, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pack_lab.demo", "--path", "rtm-python", "--rows", "200000",
         "--rate", "500", "--partitions", "1", "--pipeline", "passthrough", "--timeout", "600",
         "--output-dir", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "sent=" in line and not line.split("sent=")[1].startswith("0/"):
                break  # rows are flowing: the table and the checkpoint exist
            assert time.monotonic() < deadline, "".join(seen)
        else:
            pytest.fail("the demo ended before rows flowed: " + "".join(seen) + proc.stderr.read())
        assert any(tmp.glob(demo.CHECKPOINT_PREFIX + "*")), "checkpoint folder should exist mid-run"
        assert set(demo_tables(pg_conn)) - before, "demo table should exist mid-run"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err, err
    assert set(demo_tables(pg_conn)) == before
    assert not list(tmp.glob(demo.CHECKPOINT_PREFIX + "*"))
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------- runs


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_demo_lands_each_distinct_event_once_on_every_path(spark, pg_dsn, pg_conn, tmp_path):
    from rtm_lakebase.foreach import FastForeachUnavailable, foreach_jars
    from rtm_lakebase.jvm.sink import JvmSinkUnavailable, jvm_sink_jars

    try:
        jvm_sink_jars()
        jvm_built = True
    except JvmSinkUnavailable:
        jvm_built = False
    try:
        foreach_jars()
        fast_built = True
    except FastForeachUnavailable:
        fast_built = False
    options = DemoOptions(source="memory", rows=1500, rows_per_second=750, keys=50, duplicate_pct=10,
                          partitions=1, timeout_s=150, trigger="5 seconds")
    before = set(demo_tables(pg_conn))
    lines = []
    results = demo.run_demo(options, pg_dsn, log=lines.append, spark=spark)
    assert [r.path for r in results] == ["rtm-jvm", "rtm-fast-foreach", "rtm-python", "microbatch"]
    for result in results:
        if (result.path == "rtm-jvm" and not jvm_built) or (result.path == "rtm-fast-foreach" and not fast_built):
            assert result.skipped and not result.ok
            continue
        assert result.error is None, result
        assert (result.rows_sent, result.duplicates_sent, result.distinct_sent) == (1500, 150, 1350)
        assert result.rows_in_table == 1350
        assert (result.missing, result.unexpected, result.duplicated) == (0, 0, 0)
        assert result.ok
        assert result.latency["count"] == 1350 and result.engine["count"] == 1350
        assert 0 <= result.engine["p50"] <= result.latency["p50"]
    assert any("in_table=" in line for line in lines), "progress lines were printed"
    assert set(demo_tables(pg_conn)) == before  # every table dropped
    report = demo.write_report(results, options, tmp_path)
    chart, why_not = demo.write_chart(report, tmp_path)
    assert why_not is None and chart.read_bytes().startswith(b"\x89PNG")
    assert json.loads(report.read_text())["ok"] is True
    assert "OK" in demo.format_table(results)


@pytest.mark.spark
def test_without_the_jvm_sink_it_says_why_and_runs_the_rest(spark, monkeypatch):
    monkeypatch.setattr(demo, "jvm_sink_jars", lambda: ([], "javac not found: install a JDK"))
    options = DemoOptions(source="memory", paths=("rtm-jvm",))
    lines = []
    [result] = demo.run_demo(options, "host=unused", log=lines.append, spark=spark)
    assert result.skipped == "javac not found: install a JDK" and not result.ran
    assert any("skipped: javac not found" in line for line in lines)
    assert any("javac not found" in note for note in demo.format_notes([result]))
    assert not demo.overall_ok([result])  # a run where nothing ran is not a success


def test_mismatch_and_failure_are_reported():
    good = demo.PathResult(path="microbatch", title="mb", rows_sent=10, distinct_sent=10,
                           rows_in_table=10, latency={"p50": 5, "p95": 6, "p99": 7, "max": 8})
    missing = demo.PathResult(path="rtm-python", title="py", rows_sent=10, distinct_sent=10,
                              rows_in_table=9, missing=1)
    failed = demo.PathResult(path="rtm-jvm", title="jvm", error="the streaming query stopped")
    assert good.ok and not missing.ok and not failed.ok
    table = demo.format_table([failed, missing, good])
    assert "MISMATCH" in table and "FAILED" in table and "OK" in table
    assert not demo.overall_ok([good, missing])
    assert demo.overall_ok([good])


@pytest.mark.spark
def test_too_few_slots_in_the_running_session_fails_before_any_table(spark, pg_dsn, pg_conn):
    """The shared session has 4 slots; 3 source + 2 shuffle partitions need 5."""
    options = DemoOptions(source="memory", rows=10, partitions=3, paths=("rtm-python",))
    before = set(demo_tables(pg_conn))
    with pytest.raises(RuntimeError, match="CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT|slot"):
        demo.run_demo(options, pg_dsn, log=lambda _line: None, spark=spark)
    assert set(demo_tables(pg_conn)) == before


@pytest.mark.parametrize("dsn", ["host=/var/run/postgresql dbname=x user=y password=" + SECRET,
                                 "host=127.0.0.1 dbname=x password=" + SECRET + " service=nope"])
def test_a_dsn_the_jvm_sink_cannot_use_skips_that_path_with_the_reason(dsn):
    why = demo.jvm_dsn_problem(dsn)
    assert why and why.startswith("the JVM sink cannot use PG_DSN") and SECRET not in why
    assert demo.jvm_dsn_problem("host=127.0.0.1 port=5432 dbname=x user=y password=" + SECRET) is None


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.parametrize("keep_table", [False, True])
def test_a_failing_path_leaves_no_checkpoint_and_no_table_unless_kept(
        keep_table, spark, pg_dsn, pg_conn, tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def broken_start(path, events, dsn, table, checkpoint, options):
        assert Path(checkpoint).is_dir() and table in demo_tables(pg_conn)
        raise RuntimeError("the sink refused to start")

    monkeypatch.setattr(demo, "start_query", broken_start)
    before = set(demo_tables(pg_conn))
    options = DemoOptions(source="memory", partitions=1, paths=("microbatch",), keep_table=keep_table)
    [result] = demo.run_demo(options, pg_dsn, log=lambda _line: None, spark=spark)
    assert result.error == "the sink refused to start" and not result.ok
    assert not list(tmp_path.glob(demo.CHECKPOINT_PREFIX + "*"))
    left = set(demo_tables(pg_conn)) - before
    if keep_table:
        assert len(left) == 1
        pg_conn.execute(f'DROP TABLE "{left.pop()}"')
    else:
        assert not left


@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.slow
def test_the_demo_reads_kafka_and_every_table_is_exact(spark, kafka_bootstrap, pg_dsn):
    """--source kafka (the default): the simulator produces into a topic (keyed by device, two
    partitions, duplicates) and the path reads it; latency runs from the Kafka record timestamp."""
    options = DemoOptions(source="kafka", rows=600, rows_per_second=300, keys=30, duplicate_pct=10,
                          partitions=2, timeout_s=150, trigger="5 seconds", paths=("rtm-jvm", "rtm-python"))
    lines = []
    results = demo.run_demo(options, pg_dsn, log=lines.append, spark=spark, kafka_bootstrap=kafka_bootstrap)
    for result in results:
        if result.skipped:
            continue
        assert result.error is None, result
        assert (result.rows_sent, result.duplicates_sent, result.distinct_sent) == (600, 60, 540)
        assert (result.rows_in_table, result.missing, result.unexpected, result.duplicated) == (540, 0, 0, 0)
        assert result.latency["count"] == 540 and result.latency["p50"] >= 0
    assert any(not r.skipped for r in results)
    assert DemoOptions().source == "kafka"
