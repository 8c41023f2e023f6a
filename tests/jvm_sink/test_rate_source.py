"""The lab's rate source (pack_lab/jvm/RateSource.java) through the JVM sink into Postgres.

Real-time mode: rows 0..N-1 each sent exactly once with sent_ms = start + floor(i * 1000 / rate)
and never before that time; a stop and restart from the checkpoint mid-stream leaves no gap and no
duplicate, and every replayed row is identical to the first attempt. Micro-batch: the same rows.
Bad options fail at load() with one line naming the option.
"""

from __future__ import annotations

import time

import pytest
from psycopg import sql

from pack_lab.cluster_stream import PAYLOAD, RatePlan
from pack_lab.rate_source import rate_stream
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER
from pack_lab.sink_clock import WRITTEN_MS_COLUMN
from rtm_lakebase.jvm.sink import start_jvm_sink_query
from tests.jvm_sink.conftest import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.postgres]


@pytest.fixture
def rate_spark(jvm_spark):
    from py4j.java_gateway import JavaClass

    if not isinstance(jvm_spark.sparkContext._jvm.pack_lab.jvm.RateSource, JavaClass):
        pytest.fail("pack_lab.jvm.RateSource is not on the shared session's classpath (scripts/build_jvm_sink.sh "
                    "builds pack_lab/jvm/build/rtm-lab-rate-source.jar; tests/conftest.py adds it)")
    return jvm_spark


def make_rate_table(conn, table: str) -> None:
    """id-keyed table plus an audit of every insert attempt (a BEFORE INSERT trigger fires on replays too)."""
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, sent_ms bigint NOT NULL, payload text, "
                         + WRITTEN_MS_COLUMN + ")").format(sql.Identifier(table)))
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint, sent_ms bigint, payload text)").format(
        sql.Identifier(table + "_audit")))
    conn.execute(sql.SQL(
        "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO {a} VALUES (NEW.id, NEW.sent_ms, NEW.payload); RETURN NEW; END $$").format(
        f=sql.Identifier(table + "_log"), a=sql.Identifier(table + "_audit")))
    conn.execute(sql.SQL("CREATE TRIGGER log_attempts BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()")
                 .format(t=sql.Identifier(table), f=sql.Identifier(table + "_log")))


def start(spark, plan: RatePlan, dsn, table, checkpoint, trigger, num_partitions=1):
    df = rate_stream(spark, plan.rate, plan.total_rows, plan.start_ms, payload=PAYLOAD, num_partitions=num_partitions)
    return start_jvm_sink_query(df, dsn=dsn, table=table, key_columns=("id",), checkpoint_location=checkpoint,
                                trigger=trigger, max_dwell_ms=20)


def count(conn, table) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]


def check_table(conn, table, plan: RatePlan) -> dict[int, int]:
    """Rows 0..N-1, each with its sent_ms and payload, none written before sent_ms; returns attempts per id."""
    rows = conn.execute(sql.SQL("SELECT id, sent_ms, payload, written_ms FROM {} ORDER BY id").format(
        sql.Identifier(table))).fetchall()
    assert [r[0] for r in rows] == list(range(plan.total_rows)), "ids are not exactly 0..N-1"
    for i, sent_ms, payload, written_ms in rows:
        assert sent_ms == plan.start_ms + i * 1000 // plan.rate, (i, sent_ms)
        assert payload == PAYLOAD
        assert written_ms >= sent_ms, f"row {i} was written {sent_ms - written_ms} ms before it was due"
    # every attempt (replays included) carried the same values as the row in the table
    differing = conn.execute(sql.SQL("SELECT count(*) FROM {a} a JOIN {t} t USING (id) "
                                     "WHERE a.sent_ms <> t.sent_ms OR a.payload <> t.payload").format(
        a=sql.Identifier(table + "_audit"), t=sql.Identifier(table))).fetchone()[0]
    assert differing == 0, f"{differing} replayed rows differ from their first emission"
    return dict(conn.execute(sql.SQL("SELECT id, count(*) FROM {} GROUP BY id").format(
        sql.Identifier(table + "_audit"))).fetchall())


def test_real_time_mode_emits_each_row_once_on_time(rate_spark, pg_conn, pg_dsn, table_name, checkpoint):
    plan = RatePlan.starting_soon(rate=200, seconds=6, lead_ms=2000)
    make_rate_table(pg_conn, table_name)
    query = start(rate_spark, plan, pg_dsn, table_name, checkpoint, {"realTime": MIN_REAL_TIME_TRIGGER})
    wait_until(lambda: count(pg_conn, table_name) >= plan.total_rows, query, 90, f"{plan.total_rows} rows")
    time.sleep(1.0)  # nothing more may come: the source stops at totalRows
    query.stop()
    attempts = check_table(pg_conn, table_name, plan)
    assert sorted(set(attempts.values())) == [1], "a row was sent more than once in a run without failures"
    # the engine's batches kept advancing the source's offset (real-time mode, not one endless batch)
    assert query.lastProgress is not None and query.lastProgress["sources"][0]["endOffset"] is not None


def test_two_partitions_stripe_the_ids_each_once(rate_spark, pg_conn, pg_dsn, table_name, checkpoint):
    plan = RatePlan.starting_soon(rate=300, seconds=4, lead_ms=2000)
    make_rate_table(pg_conn, table_name)
    query = start(rate_spark, plan, pg_dsn, table_name, checkpoint, {"realTime": MIN_REAL_TIME_TRIGGER},
                  num_partitions=2)
    wait_until(lambda: count(pg_conn, table_name) >= plan.total_rows, query, 90, f"{plan.total_rows} rows")
    time.sleep(1.0)
    query.stop()
    attempts = check_table(pg_conn, table_name, plan)
    assert sorted(set(attempts.values())) == [1]


def test_restart_from_checkpoint_mid_stream_no_gap_no_duplicate(rate_spark, pg_conn, pg_dsn, table_name,
                                                                 checkpoint):
    plan = RatePlan.starting_soon(rate=200, seconds=14, lead_ms=2000)
    make_rate_table(pg_conn, table_name)
    trigger = {"realTime": MIN_REAL_TIME_TRIGGER}
    query = start(rate_spark, plan, pg_dsn, table_name, checkpoint, trigger)
    # past the first checkpoint (5 s batch) and before the end
    wait_until(lambda: count(pg_conn, table_name) >= 1400, query, 90, "1,400 rows before the stop")
    query.stop()
    stopped_at = count(pg_conn, table_name)
    assert stopped_at < plan.total_rows, "the stop came after the last row: nothing was tested"
    query = start(rate_spark, plan, pg_dsn, table_name, checkpoint, trigger)
    wait_until(lambda: count(pg_conn, table_name) >= plan.total_rows, query, 90, f"{plan.total_rows} rows")
    time.sleep(1.0)
    query.stop()
    attempts = check_table(pg_conn, table_name, plan)  # no gap, no duplicate, replays identical
    assert len(attempts) == plan.total_rows


def test_micro_batch_emits_the_same_rows(rate_spark, pg_conn, pg_dsn, table_name, checkpoint):
    plan = RatePlan.starting_soon(rate=400, seconds=5, lead_ms=1000)
    make_rate_table(pg_conn, table_name)
    query = start(rate_spark, plan, pg_dsn, table_name, checkpoint, {"processingTime": "0 seconds"})
    wait_until(lambda: count(pg_conn, table_name) >= plan.total_rows, query, 90, f"{plan.total_rows} rows")
    time.sleep(1.0)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    query.stop()
    check_table(pg_conn, table_name, plan)
    assert len(batches) >= 2, "micro-batch read every row in one batch: latestOffset ignored the clock"
    assert sum(p["numInputRows"] for p in batches) == plan.total_rows


@pytest.mark.parametrize(("options", "message"), [
    ({"rowsPerSecond": "0"}, "option rowsPerSecond must be at least 1, got 0"),
    ({"rowsPerSecond": "fast"}, "option rowsPerSecond must be a whole number, got 'fast'"),
    ({"startMs": None}, "option startMs is required"),
    ({"totalRows": "-5"}, "option totalRows must be at least 0, got -5"),
    ({"rowsPersecond2": "5"}, "unknown option 'rowspersecond2'"),  # Spark lower-cases option keys
])
def test_bad_options_fail_at_load_naming_the_option(rate_spark, options, message):
    good = {"rowsPerSecond": "10", "totalRows": "100", "startMs": "0"}
    reader = rate_spark.readStream.format("pack_lab.jvm.RateSource")
    for key, value in {**good, **options}.items():
        if value is not None:
            reader = reader.option(key, value)
    with pytest.raises(Exception) as caught:
        reader.load()
    text = str(caught.value)
    assert message in text, text
    assert text.strip().splitlines()[0].count("RateSource:") == 1


def test_rate_plan_counts_the_rows_the_source_has_emitted():
    """RatePlan.due (the soak's 'sent') agrees with the source's sent_ms = start + floor(i * 1000 / rate)."""
    plan = RatePlan(rate=3, total_rows=5, start_ms=10_000)
    sent = [plan.start_ms + i * 1000 // plan.rate for i in range(plan.total_rows)]  # 0, 333, 666, 1000, 1333
    for now in range(9_990, 12_000, 7):
        assert plan.due(now) == sum(1 for s in sent if s <= now), now
    assert plan.due(10**12) == plan.total_rows


def test_a_stale_or_missing_jar_is_refused_with_the_build_command(tmp_path, monkeypatch):
    import pack_lab.rate_source as rs

    (tmp_path / "RateSource.java").write_text("class A {}")
    jar = tmp_path / "build" / "rtm-lab-rate-source.jar"
    monkeypatch.setattr(rs, "JVM_DIR", tmp_path)
    monkeypatch.setattr(rs, "DEFAULT_JAR", jar)
    monkeypatch.delenv(rs.JAR_ENV, raising=False)
    with pytest.raises(rs.RateSourceUnavailable, match="not built.*build_jvm_sink.sh"):
        rs.rate_source_jars()
    jar.parent.mkdir()
    jar.write_bytes(b"jar")
    jar.with_suffix(".sha256").write_text(rs._sources_sha() + "\n")
    assert rs.rate_source_jars() == [str(jar)]
    (tmp_path / "RateSource.java").write_text("class B {}")
    with pytest.raises(rs.RateSourceUnavailable, match="older than.*build_jvm_sink.sh"):
        rs.rate_source_jars()


def test_a_cluster_driver_asks_only_for_the_jars_its_source_and_paths_use(tmp_path, monkeypatch):
    """The in-memory source with the stock paths runs without the rate source's or the fast path's jar."""
    import pack_lab.rate_source as rs
    import rtm_lakebase.foreach as fast
    from pack_lab.cluster_stream import session_jars
    from rtm_lakebase.jvm import jvm_sink_jars

    monkeypatch.setattr(rs, "DEFAULT_JAR", tmp_path / "missing-rate.jar")
    monkeypatch.delenv(rs.JAR_ENV, raising=False)
    monkeypatch.setattr(fast, "DEFAULT_JAR", tmp_path / "missing-foreach.jar")
    monkeypatch.delenv(fast.JAR_ENV, raising=False)
    assert session_jars("memory", ["rtm_jvm", "rtm_python", "mb_python"]) == jvm_sink_jars()
    with pytest.raises(rs.RateSourceUnavailable, match="not built"):
        session_jars("rate", ["rtm_jvm"])
    with pytest.raises(fast.FastForeachUnavailable, match="not built"):
        session_jars("memory", ["rtm_fast"])
