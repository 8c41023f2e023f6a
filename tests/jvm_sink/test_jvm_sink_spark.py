"""The JVM sink end to end: Spark (real-time mode and micro-batch) → Java ForeachWriter → a real Postgres.

Exact table contents after every run (0 missing, 0 duplicated), replays after a
stop mid-batch, restart from the checkpoint, a Postgres restart under a running
query, hostile identifiers, bad rows named by key and column, the dwell flush
with no further rows, and the password kept out of every message.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from psycopg import sql
from pyspark.sql.types import LongType, StringType, StructField, StructType

from pack_lab.foreach_lab import reported_error
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from rtm_lakebase.jvm.sink import build_jvm_writer, start_jvm_sink_query
from rtm_lakebase.sink.statements import create_table_sql
from tests.jvm_sink.conftest import message_facts, query_error, require_password_auth, wait_until
from tests.sink.helpers import make_table, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SCHEMA = "id BIGINT, version BIGINT, name STRING"
REAL_TIME = {"realTime": MIN_REAL_TIME_TRIGGER}
MICRO_BATCH = {"processingTime": "0 seconds"}
#: A long batch far longer than any test step: whatever reaches Postgres before it ends was
#: written by the writer's own timer, not by close().
LONG_BATCH = {"realTime": "3 minutes"}


def events(n_keys: int, versions: int) -> list[dict]:
    """Every key in several versions, plus stale replays of version 1 after the newest."""
    out = [{"id": k, "version": v, "name": f"k{k}-v{v}"} for v in range(1, versions + 1) for k in range(n_keys)]
    out.extend({"id": k, "version": 1, "name": "stale replay"} for k in range(0, n_keys, 3))
    return out


def expected(n_keys: int, versions: int) -> list[tuple]:
    return [(k, versions, f"k{k}-v{versions}") for k in range(n_keys)]


def wait_for_rows(conn, table, want, query, timeout=90.0, **kwargs):
    def same():
        got = table_rows(conn, table, **kwargs)
        return got == want

    try:
        wait_until(same, query, timeout, f"{len(want)} expected rows in {table}", interval=0.1)
    except AssertionError as exc:
        got = table_rows(conn, table, **kwargs)
        diff = [(g, w) for g, w in zip(got, want, strict=False) if g != w]
        raise AssertionError(f"{exc}; table has {len(got)} rows, first differences (got, want): {diff[:3]}") from None


def start(source, dsn, table, checkpoint, trigger=REAL_TIME, **options):
    options.setdefault("max_dwell_ms", 20)
    return start_jvm_sink_query(source.dataframe(), dsn=dsn, table=table, checkpoint_location=checkpoint,
                                trigger=trigger, **options)


def add_audit(conn, table):
    """Log every row the sink tries to insert (a BEFORE INSERT trigger fires even when ON CONFLICT wins)."""
    conn.execute(sql.SQL("CREATE TABLE {} (seq bigserial, id bigint, version bigint)").format(
        sql.Identifier(table + "_audit")))
    conn.execute(sql.SQL(
        "CREATE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "INSERT INTO {a} (id, version) VALUES (NEW.id, NEW.version); RETURN NEW; END $$").format(
        f=sql.Identifier(table + "_log"), a=sql.Identifier(table + "_audit")))
    conn.execute(sql.SQL("CREATE TRIGGER log_attempts BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION {f}()")
                 .format(t=sql.Identifier(table), f=sql.Identifier(table + "_log")))


def attempts(conn, table) -> dict[int, int]:
    rows = conn.execute(sql.SQL("SELECT id, count(*) FROM {} GROUP BY id").format(
        sql.Identifier(table + "_audit"))).fetchall()
    return dict(rows)


def row_versions(conn, table) -> dict[int, str]:
    """id → xmin: changes only when the row is rewritten."""
    return dict(conn.execute(sql.SQL("SELECT id, xmin::text FROM {}").format(sql.Identifier(table))).fetchall())


# -- exact rows ---------------------------------------------------------------------------------

@pytest.mark.parametrize("trigger", [MICRO_BATCH, REAL_TIME], ids=["micro_batch", "real_time"])
def test_upsert_writes_exactly_the_expected_rows(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint, trigger):
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=2)
    query = start(source, pg_dsn, table_name, checkpoint, trigger, key_columns=("id",), version_column="version",
                  max_batch_rows=50)
    try:
        rows = events(150, 3)
        source.add(rows[:200])
        source.add(rows[200:])
        wait_for_rows(pg_conn, table_name, expected(150, 3), query)
    finally:
        query.stop()


def test_upsert_without_version_skips_unchanged_rows_and_last_row_wins(jvm_spark, pg_dsn, pg_conn, table_name,
                                                                       checkpoint):
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, MICRO_BATCH)  # upsertkey from the primary key
    try:
        source.add([{"id": i, "version": 1, "name": "first"} for i in range(10)]
                   + [{"id": 3, "version": 1, "name": "last wins"}])
        want = [(i, 1, "last wins" if i == 3 else "first") for i in range(10)]
        wait_for_rows(pg_conn, table_name, want, query)
        before = row_versions(pg_conn, table_name)
        source.add([{"id": i, "version": v, "name": n} for i, v, n in want[:5]]  # 0..4 unchanged
                   + [{"id": 7, "version": 2, "name": "changed"}])
        want[7] = (7, 2, "changed")
        wait_for_rows(pg_conn, table_name, want, query)
        after = row_versions(pg_conn, table_name)
        assert [i for i in range(10) if before[i] != after[i]] == [7]  # identical updates were skipped
    finally:
        query.stop()


def test_insert_ignore_keeps_the_first_row_per_key(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, MICRO_BATCH, mode="insert_ignore")
    try:
        source.add([{"id": 1, "version": 1, "name": "first"}, {"id": 1, "version": 2, "name": "second"},
                    {"id": 2, "version": 1, "name": "only"}])
        wait_for_rows(pg_conn, table_name, [(1, 1, "first"), (2, 1, "only")], query)
        source.add([{"id": 1, "version": 3, "name": "later"}, {"id": 3, "version": 1, "name": "new"}])
        wait_for_rows(pg_conn, table_name, [(1, 1, "first"), (2, 1, "only"), (3, 1, "new")], query)
    finally:
        query.stop()


def test_append_writes_every_row(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    make_table(pg_conn, table_name, key=())
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=2)
    query = start(source, pg_dsn, table_name, checkpoint, REAL_TIME, mode="append", max_batch_rows=7)
    try:
        rows = [{"id": i % 5, "version": i, "name": f"r{i}"} for i in range(40)]
        source.add(rows)
        want = sorted((r["id"], r["version"], r["name"]) for r in rows)
        wait_until(lambda: sorted(table_rows(pg_conn, table_name)) == want, query, 90, "40 appended rows")
    finally:
        query.stop()


def test_rows_of_a_flush_are_written_in_key_order(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    """One lock order for every task: keys arrive descending, the flush writes them ascending."""
    make_table(pg_conn, table_name)
    add_audit(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, MICRO_BATCH, max_dwell_ms=60_000)
    try:
        source.add([{"id": k, "version": 1, "name": "x"} for k in (50, 7, 31, 2, 44, 19)])
        wait_for_rows(pg_conn, table_name, [(k, 1, "x") for k in (2, 7, 19, 31, 44, 50)], query)
    finally:
        query.stop()
    order = pg_conn.execute(sql.SQL("SELECT id FROM {} ORDER BY seq").format(
        sql.Identifier(table_name + "_audit"))).fetchall()
    assert [r[0] for r in order] == [2, 7, 19, 31, 44, 50]


# -- timing -------------------------------------------------------------------------------------

def test_dwell_flush_writes_the_tail_with_no_further_rows(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    """batchsize is never reached and no row follows: only the writer's timer can write these rows."""
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, LONG_BATCH, max_batch_rows=1000, max_dwell_ms=200)
    try:
        source.add([{"id": i, "version": 1, "name": "tail"} for i in range(3)])
        wait_for_rows(pg_conn, table_name, [(i, 1, "tail") for i in range(3)], query, timeout=60)
        assert query.recentProgress == []  # the first long batch is still running: close() has not come
    finally:
        query.stop()


# -- replay and restart ---------------------------------------------------------------------------

@pytest.mark.slow
def test_stop_mid_batch_then_restart_replays_rows_harmlessly(jvm_spark, pg_dsn, pg_conn, table_name,
                                                            checkpoint):
    make_table(pg_conn, table_name)
    add_audit(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    first = start(source, pg_dsn, table_name, checkpoint, LONG_BATCH, version_column="version")
    try:
        source.add(events(20, 2))
        wait_for_rows(pg_conn, table_name, expected(20, 2), first)
        assert first.recentProgress == []  # written by the timer; the batch is not committed
    finally:
        first.stop()
    baseline = attempts(pg_conn, table_name)
    written = row_versions(pg_conn, table_name)
    second = start(source, pg_dsn, table_name, checkpoint, REAL_TIME, version_column="version")
    try:
        # The uncommitted rows are sent again by the restarted query ...
        wait_until(lambda: all(attempts(pg_conn, table_name).get(k, 0) > baseline[k] for k in range(20)),
                   second, 90, "the replay of the uncommitted rows")
        # ... and rewrite nothing: the version guard skips versions that are not newer.
        assert row_versions(pg_conn, table_name) == written
        assert table_rows(pg_conn, table_name) == expected(20, 2)
        source.add(events(30, 3)[60:])  # keys 0..29 at version 3 (and stale version-1 replays)
        wait_for_rows(pg_conn, table_name, expected(30, 3), second)  # 0 lost, 0 duplicated
    finally:
        second.stop()


@pytest.mark.slow
def test_restart_from_checkpoint_resumes_after_the_committed_rows(jvm_spark, pg_dsn, pg_conn, table_name,
                                                                 checkpoint, tmp_path):
    make_table(pg_conn, table_name)
    add_audit(pg_conn, table_name)
    folder = tmp_path / "in"
    folder.mkdir()

    def run_available_now():
        frame = jvm_spark.readStream.schema(SCHEMA).json(str(folder))
        query = start_jvm_sink_query(frame, dsn=pg_dsn, table=table_name, checkpoint_location=checkpoint,
                                     trigger={"availableNow": True}, version_column="version")
        try:
            query.awaitTermination(180)
        finally:
            query.stop()
        assert query.exception() is None

    (folder / "a.json").write_text("".join(json.dumps(r) + "\n" for r in events(20, 1)[:20]))
    run_available_now()
    assert table_rows(pg_conn, table_name) == expected(20, 1)
    (folder / "b.json").write_text("".join(
        json.dumps({"id": k, "version": 2, "name": f"k{k}-v2"}) + "\n" for k in range(10, 30)))
    run_available_now()  # same checkpoint: only b.json is new
    want = [(k, 1, f"k{k}-v1") for k in range(10)] + [(k, 2, f"k{k}-v2") for k in range(10, 30)]
    assert table_rows(pg_conn, table_name) == want
    tries = attempts(pg_conn, table_name)
    assert [tries[k] for k in range(10)] == [1] * 10  # committed rows were not sent again


@pytest.mark.slow
def test_real_time_query_survives_a_postgres_restart(jvm_spark, pg_server, table_name, checkpoint):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_server.dsn, table_name, checkpoint, LONG_BATCH, version_column="version")
    try:
        source.add(events(100, 1))
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            wait_for_rows(conn, table_name, expected(100, 1), query)
        pg_server.restart(down_seconds=2)  # cuts the sink's connection under the running long batch
        source.add(events(100, 2)[100:200])
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            wait_for_rows(conn, table_name, expected(100, 2), query)
        assert query.isActive and query.recentProgress == []  # recovered inside the same long batch
    finally:
        query.stop()


# -- hostile input ------------------------------------------------------------------------------

def test_hostile_identifiers_are_quoted(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    victim = table_name + "_victim"
    make_table(pg_conn, victim)
    schema = 'sch"ema; --'
    table = f'{table_name}"; DROP TABLE {victim}; --'
    key2 = 'k,2 "x"'
    columns = {"id": "bigint", key2: "text", 'na"me': "text", "x; DELETE FROM pg_class": "bigint"}
    pg_conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        pg_conn.execute(create_table_sql(table, columns, ("id", key2), schema=schema))
        spark_schema = StructType([StructField("id", LongType()), StructField(key2, StringType()),
                                   StructField('na"me', StringType()),
                                   StructField("x; DELETE FROM pg_class", LongType())])
        source = RealTimeMemorySource(jvm_spark, spark_schema, num_partitions=1)
        query = start(source, pg_dsn, table, checkpoint, MICRO_BATCH, schema=schema, key_columns=("id", key2))
        try:
            source.add([{"id": 1, key2: "a,b", 'na"me': "quoted", "x; DELETE FROM pg_class": 5},
                        {"id": 1, key2: "a,b", 'na"me': "again", "x; DELETE FROM pg_class": 6},
                        {"id": 1, key2: "other", 'na"me': "second key", "x; DELETE FROM pg_class": 7}])
            target = sql.SQL("SELECT * FROM {} ORDER BY 2").format(sql.Identifier(schema, table))
            want = [(1, "a,b", "again", 6), (1, "other", "second key", 7)]
            wait_until(lambda: pg_conn.execute(target).fetchall() == want, query, 90, "rows under hostile names")
        finally:
            query.stop()
        assert pg_conn.execute("SELECT to_regclass(%s)", (victim,)).fetchone()[0] is not None
    finally:
        pg_conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.parametrize("spark_schema, bad, column, reason", [
    (SCHEMA, {"id": 7, "version": 1, "name": "x" * 21}, "name", "value too long"),
    ("id BIGINT, version STRING, name STRING", {"id": 7, "version": "seven", "name": "x"}, "version",
     "invalid input syntax"),
    (SCHEMA, {"id": 7, "version": None, "name": "x"}, "version", "not-null"),
    (SCHEMA, {"id": None, "version": 1, "name": "x"}, "id", "key column is null"),
], ids=["too_long", "not_a_number", "null_in_not_null", "null_key"])
def test_bad_row_is_named_by_key_and_column_and_its_flush_is_not_written(
        jvm_spark, pg_dsn, pg_conn, table_name, checkpoint, spark_schema, bad, column, reason):
    make_table(pg_conn, table_name, {"id": "bigint", "version": "bigint NOT NULL", "name": "varchar(20)"})
    source = RealTimeMemorySource(jvm_spark, spark_schema, num_partitions=1)
    # A timer flush could split the micro-batch; with a long interval each micro-batch is one flush.
    query = start(source, pg_dsn, table_name, checkpoint, MICRO_BATCH, max_dwell_ms=60_000)
    try:
        good = [{"id": i, "version": 1, "name": f"n{i}"} for i in range(5)]
        source.add(good)
        wait_for_rows(pg_conn, table_name, [(i, 1, f"n{i}") for i in range(5)], query)
        source.add([{"id": i, "version": 1, "name": f"n{i}"} for i in range(10, 13)] + [bad])
        message = query_error(query)
    finally:
        query.stop()
    facts = message_facts(message)
    assert facts["key"] == ("id=null" if bad["id"] is None else "id=7"), message
    assert facts["column"] == column and reason in message, message
    assert [r[0] for r in table_rows(pg_conn, table_name)] == [0, 1, 2, 3, 4]  # nothing of the bad flush


def test_bad_row_under_real_time_mode_stops_the_query_with_its_name(jvm_spark, pg_dsn, pg_conn, table_name,
                                                                    checkpoint):
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, REAL_TIME)
    try:
        source.add([{"id": 3, "version": 1, "name": "y" * 30}])
        message = query_error(query)
    finally:
        query.stop()
    assert message_facts(message) == {"key": "id=3", "column": "name", "sqlstate": "22001"}, message


def test_a_failed_flush_fails_a_real_time_query_in_seconds_not_at_the_batch_end(jvm_spark, pg_dsn, pg_conn,
                                                                                 table_name, checkpoint):
    # The flusher interrupts the task thread: with a 5-minute long batch the query still fails at once.
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_dsn, table_name, checkpoint, {"realTime": "5 minutes"}, max_retries=0)
    try:
        source.add([{"id": 1, "version": 1, "name": "x"}])
        wait_for_rows(pg_conn, table_name, [(1, 1, "x")], query)
        pg_conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table_name)))
        started = time.monotonic()
        source.add([{"id": 2, "version": 1, "name": "y"}])
        # Fails the test if the query is still running after 240 s: generous for a loaded machine, yet well
        # before the 300 s batch end, the failure this test catches (the error waiting for the batch to end).
        message = query_error(query, timeout=240)
        elapsed = time.monotonic() - started
    finally:
        query.stop()
    assert elapsed < 240 and f'relation "{table_name}" does not exist' in message
    # The flush's error is the task's error, or the cause of the interrupt's exception that failed the task
    # (the source's wait for rows), not only a suppressed exception of it.
    how, kind = reported_error(message)
    assert how in ("error", "cause") and kind.endswith("PostgresSinkException"), message[:3000]


def test_setup_errors_name_the_table_and_columns(jvm_spark, pg_dsn, pg_conn, table_name, checkpoint):
    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    app = f"jvm-sink-{table_name}"
    query = start(source, f"{pg_dsn} application_name={app}", table_name + "_missing", checkpoint, MICRO_BATCH)
    source.add([{"id": 1, "version": 1, "name": "x"}])
    assert f'table "{table_name}_missing" (in the current schema) not found' in query_error(query)
    # open() failed after connecting: it closed its connection (Spark calls no close() then).
    sessions = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
    wait_until(lambda: pg_conn.execute(sessions, (app,)).fetchone()[0] == 0, None, 10, "no connection left open")
    make_table(pg_conn, table_name, {"id": "bigint", "name": "text"})
    query = start(source, pg_dsn, table_name, checkpoint + "-2", MICRO_BATCH)
    source.add([{"id": 2, "version": 1, "name": "x"}])
    assert "column(s) [version] not in table" in query_error(query)


# -- secrets ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_password_never_appears_in_messages_or_to_string(jvm_spark, pg_server, table_name, checkpoint):
    secret, wrong = "Right-Pa55word-42", "Wr0ng-Pa55word-99"
    require_password_auth(pg_server, secret)
    good_dsn = pg_server.dsn + f" password={secret}"
    with psycopg.connect(good_dsn, autocommit=True) as conn:
        make_table(conn, table_name)
    writer = build_jvm_writer(jvm_spark, dsn=good_dsn, table=table_name)
    assert secret not in writer.toString() and "password=***" in writer.toString()
    url_with_password = jvm_spark.sparkContext._jvm.java.util.HashMap()
    url_with_password.put("url", f"jdbc:postgresql://127.0.0.1:{pg_server.port}/postgres?password={secret}")
    url_with_password.put("dbtable", table_name)
    assert secret not in jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.PostgresForeachWriter(
        url_with_password).toString()

    source = RealTimeMemorySource(jvm_spark, SCHEMA, num_partitions=1)
    query = start(source, pg_server.dsn + f" password={wrong}", table_name, checkpoint, MICRO_BATCH)
    source.add([{"id": 1, "version": 1, "name": "x"}])
    message = query_error(query)
    assert "password authentication failed" in message
    assert wrong not in message and secret not in message

    query = start(source, good_dsn, table_name, checkpoint + "-2", MICRO_BATCH)
    source.add([{"id": 2, "version": 1, "name": secret + "-but-far-too-long"}])
    message = query_error(query)
    assert "rejected at column name" in message and secret not in message
