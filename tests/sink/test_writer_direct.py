"""PostgresForeachWriter driven directly (open/process/close) against a real Postgres: every mode and knob."""

from __future__ import annotations

import logging
import pickle
import time

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import Row

from rtm_lakebase.calc.connection_budget import ConnectionBudgetExceeded, check_connection_budget, max_connections
from rtm_lakebase.postgres.connection import ConnectionSettings, Secret, redact
from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkError, SinkSettings
from rtm_lakebase.sink.metrics import percentile
from rtm_lakebase.sink.statements import create_table_sql
from tests.sink.helpers import make_table, table_rows, wait_for_count

pytestmark = pytest.mark.postgres

PASSWORD = "pw-Sup3r-s3cret-7731"


def writer(dsn, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


def run(w, rows, partition=0, epoch=0):
    w.open(partition, epoch)
    try:
        for row in rows:
            w.process(row)
    except BaseException as exc:
        w.close(exc)
        raise
    w.close(None)
    return w


def test_upsert_dedups_within_a_flush_and_skips_unchanged(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    rows = [{"id": 1, "version": 1, "name": "a"}, {"id": 2, "version": 1, "name": "b"},
            {"id": 1, "version": 1, "name": "a2"}]  # same key twice in one flush: last wins
    w = run(writer(pg_dsn, table_name), rows)
    assert table_rows(pg_conn, table_name) == [(1, 1, "a2"), (2, 1, "b")]
    assert w.metrics.rows_deduplicated == 1 and w.metrics.rows_written == 2
    # Same rows again: nothing changes, both counted as unchanged (no new tuple written).
    w2 = run(writer(pg_dsn, table_name), [{"id": 1, "version": 1, "name": "a2"},
                                          {"id": 2, "version": 5, "name": "b"}])
    assert w2.metrics.rows_written == 1 and w2.metrics.rows_skipped_unchanged == 1
    assert table_rows(pg_conn, table_name) == [(1, 1, "a2"), (2, 5, "b")]


def test_unchanged_rows_create_no_new_tuple(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    rows = [{"id": i, "version": 1, "name": "x"} for i in range(10)]
    run(writer(pg_dsn, table_name), rows)
    xmins = sql.SQL("SELECT xmin::text FROM {} ORDER BY id").format(sql.Identifier(table_name))
    before = pg_conn.execute(xmins).fetchall()
    run(writer(pg_dsn, table_name), rows)
    after = pg_conn.execute(xmins).fetchall()
    assert before == after


def test_version_guard_never_lets_an_older_row_win(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 1, "version": 5, "name": "v5"}, {"id": 2, "version": 1, "name": "v1"}])
    # Replay of older and equal versions, plus one newer row.
    w = run(writer(pg_dsn, table_name, version_column="version"),
            [{"id": 1, "version": 3, "name": "old"}, {"id": 2, "version": 1, "name": "same-version"},
             {"id": 3, "version": 1, "name": "new"}])
    assert table_rows(pg_conn, table_name) == [(1, 5, "v5"), (2, 1, "v1"), (3, 1, "new")]
    assert w.metrics.rows_skipped_stale == 2 and w.metrics.rows_written == 1
    # Within one flush the highest version wins whatever the arrival order.
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 1, "version": 9, "name": "v9"}, {"id": 1, "version": 7, "name": "v7"}])
    assert table_rows(pg_conn, table_name)[0] == (1, 9, "v9")
    # Equal versions: the first row wins, inside one flush as across flushes.
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 4, "version": 2, "name": "first"}, {"id": 4, "version": 2, "name": "second"}])
    assert table_rows(pg_conn, table_name)[-1] == (4, 2, "first")


def test_insert_ignore_keeps_the_first_row(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    run(writer(pg_dsn, table_name, mode="insert_ignore"), [{"id": 1, "version": 1, "name": "first"}])
    w = run(writer(pg_dsn, table_name, mode="insert_ignore"),
            [{"id": 1, "version": 2, "name": "later"}, {"id": 2, "version": 1, "name": "b1"},
             {"id": 2, "version": 2, "name": "b2"}])
    assert table_rows(pg_conn, table_name) == [(1, 1, "first"), (2, 1, "b1")]
    assert w.metrics.rows_written == 1 and w.metrics.rows_skipped_unchanged == 1


def test_append_copies_every_row_and_replays_duplicate(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "name": "text"}, key=())
    rows = [{"id": i % 3, "name": f"n{i}"} for i in range(7)]
    w = run(writer(pg_dsn, table_name, mode="append", max_batch_rows=3), rows)
    assert len(table_rows(pg_conn, table_name)) == 7 and w.metrics.flushes == 3
    # Append has no key: replaying the same epoch duplicates rows (at-least-once).
    run(writer(pg_dsn, table_name, mode="append"), rows)
    assert len(table_rows(pg_conn, table_name)) == 14


def test_replaying_an_epoch_leaves_the_table_as_one_run_would(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    rows = [{"id": i % 50, "version": i, "name": f"n{i}"} for i in range(200)]
    run(writer(pg_dsn, table_name, version_column="version", max_batch_rows=17), rows, epoch=3)
    once = table_rows(pg_conn, table_name)
    run(writer(pg_dsn, table_name, version_column="version", max_batch_rows=23), rows, epoch=3)
    assert table_rows(pg_conn, table_name) == once
    assert once == [(k, 150 + k, f"n{150 + k}") for k in range(50)]


def test_batch_size_flush_commits_before_close(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_batch_rows=5)
    w.open(0, 0)
    try:
        for i in range(12):
            w.process({"id": i, "version": 1, "name": "x"})
        # Two full batches are written by the flusher thread without close(); the last 2 rows wait.
        wait_for_count(pg_conn, table_name, 10, timeout=60)
        time.sleep(0.3)
        assert len(table_rows(pg_conn, table_name)) == 10
    finally:
        w.close(None)
    assert len(table_rows(pg_conn, table_name)) == 12
    assert w.metrics.flushes == 3 and w.metrics.timer_flushes == 0


def test_dwell_timer_flushes_with_no_new_row(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_batch_rows=10_000, max_dwell_ms=150)
    w.open(0, 0)
    try:
        for i in range(3):
            w.process({"id": i, "version": 1, "name": "x"})
        # No further process() call and no close(): only the timer can write these.
        wait_for_count(pg_conn, table_name, 3, timeout=60)
        assert w.metrics.timer_flushes >= 1
        w.process({"id": 3, "version": 1, "name": "y"})
        wait_for_count(pg_conn, table_name, 4, timeout=60)
    finally:
        w.close(None)
    assert len(table_rows(pg_conn, table_name)) == 4


def test_timer_error_surfaces_on_next_process_and_on_close(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_dwell_ms=50)
    w.open(0, 0)
    w.process({"id": 1, "version": 1, "name": "far too long for twenty chars"})
    deadline = time.monotonic() + 60
    while w._flusher.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(BadRowError, match="id=1"):
        w.process({"id": 2, "version": 1, "name": "ok"})
    # close(None) after a timer failure raises it too (Spark then fails the task).
    w2 = writer(pg_dsn, table_name, max_dwell_ms=50)
    w2.open(0, 0)
    w2.process({"id": 3, "version": 1, "name": "far too long for twenty chars"})
    deadline = time.monotonic() + 60
    while w2._flusher.error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(BadRowError, match="column name"):
        w2.close(None)
    w.close(RuntimeError("task failed"))
    assert table_rows(pg_conn, table_name) == []


def test_close_with_error_discards_the_buffer(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    w.process({"id": 1, "version": 1, "name": "x"})
    w.close(RuntimeError("process failed upstream"))
    assert table_rows(pg_conn, table_name) == []


def test_spark_rows_in_any_field_order_and_column_subset(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "version": "bigint", "name": "varchar(20)",
                                     "note": "text"})
    rows = [Row(name="a", extra="ignored", id=1, version=1), Row(name="b", extra="x", id=2, version=1)]
    run(writer(pg_dsn, table_name, columns=("id", "version", "name")), rows)
    assert table_rows(pg_conn, table_name) == [(1, 1, "a", None), (2, 1, "b", None)]
    # Plain tuples need columns=.
    run(writer(pg_dsn, table_name, columns=("id", "name")), [(3, "c")])
    assert table_rows(pg_conn, table_name)[-1] == (3, None, "c", None)


def test_key_defaults_to_primary_key_and_is_required(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "name": "text"}, key=())
    with pytest.raises(SinkError, match="no primary key"):
        writer(pg_dsn, table_name).open(0, 0)
    with pytest.raises(SinkError, match="not found"):
        writer(pg_dsn, table_name + "_missing").open(0, 0)
    w = writer(pg_dsn, table_name, mode="append")
    w.open(0, 0)
    with pytest.raises(SinkError, match="not in table"):
        w.process({"id": 1, "nope": 2})
    w.close(RuntimeError("x"))


def test_null_key_is_rejected_at_process(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    with pytest.raises(BadRowError) as info:
        w.process({"id": None, "version": 1, "name": "x"})
    w.close(info.value)
    assert info.value.column == "id" and "null" in str(info.value)


def test_metrics_report_flushes_and_percentiles(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = run(writer(pg_dsn, table_name, max_batch_rows=10), [{"id": i, "version": 1, "name": "m"} for i in range(95)])
    snap = w.metrics.snapshot()
    assert snap["flushes"] == 10 and snap["rows_written"] == 95 and snap["rows_received"] == 95
    assert 0 < snap["flush_ms_p50"] <= snap["flush_ms_p95"] <= snap["flush_ms_p99"] <= snap["flush_ms_max"]
    assert percentile([3, 1, 2, 4], 50) == 2 and percentile([], 50) is None


def test_secret_never_printed_logged_or_raised(pg_dsn, caplog):
    from pack_lab.local_postgres import free_port

    dsn = f"postgresql://alice:{PASSWORD}@127.0.0.1:{free_port()}/db?connect_timeout=2"
    w = PostgresForeachWriter(dsn, SinkSettings(table="t", max_retries=1, backoff_initial_ms=10))
    clone = pickle.loads(pickle.dumps(w))
    for text in (repr(w), str(w), repr(clone), str(clone.__getstate__()), repr(clone.connection),
                 str(vars(clone))):
        assert PASSWORD not in text
    assert clone.connection.password.reveal() == PASSWORD  # the executor still gets it
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SinkError) as info:
        clone.open(0, 0)
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(info.value)
    assert "127.0.0.1" in str(info.value)
    assert PASSWORD not in caplog.text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_redact_and_connection_defaults():
    assert redact(f"password={PASSWORD} host=x") == "password=*** host=x"
    assert redact(f"postgresql://u:{PASSWORD}@h/db") == "postgresql://u:***@h/db"
    assert PASSWORD not in redact(f"boom {PASSWORD}", Secret(PASSWORD))
    remote = ConnectionSettings.from_dsn("host=ep-x.database.cloud.databricks.com user=u dbname=d")
    assert remote.connect_kwargs()["sslmode"] == "require"
    local = ConnectionSettings.from_dsn("host=127.0.0.1 port=5433 user=u")
    kwargs = local.connect_kwargs()
    assert kwargs["sslmode"] == "disable" and kwargs["port"] == 5433
    assert kwargs["connect_timeout"] == 10 and kwargs["keepalives"] == 1
    assert kwargs["application_name"] == "spark-foreach-sink"
    provided = ConnectionSettings(host="h", user="u", password_provider=_token)
    assert provided.connect_kwargs()["password"] == "token-from-provider"
    assert "token-from-provider" not in repr(provided)
    with pytest.raises(ValueError):
        ConnectionSettings(connect_timeout=0)


def _token() -> str:
    return "token-from-provider"


def test_settings_validation():
    with pytest.raises(ValueError, match="mode"):
        SinkSettings(table="t", mode="merge")
    with pytest.raises(ValueError, match="version_column"):
        SinkSettings(table="t", mode="append", version_column="v")
    with pytest.raises(ValueError):
        SinkSettings(table="t", max_batch_rows=0)
    with pytest.raises(TypeError):
        PostgresForeachWriter("host=x", SinkSettings(table="t"), mode="append")


def test_open_never_returns_false(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name)
    assert w.open(0, 0) is True
    w.close(None)


def test_create_table_sql_refuses_unsafe_types(pg_conn):
    with pytest.raises(ValueError, match="refusing"):
        create_table_sql("t", {"id": "bigint); DROP TABLE x; --"}, ("id",))
    text = create_table_sql("t", {"id": "bigint", "v": "numeric(12,2)"}, ("id",), fillfactor=80).as_string(pg_conn)
    assert "fillfactor = 80" in text and 'PRIMARY KEY ("id")' in text


def test_connection_budget():
    assert max_connections(1) == 209 and max_connections(5) == 839 and max_connections(64) == 4000
    # Lakebase Provisioned: 1,000 per instance at any size, not the Autoscaling cap of that CU.
    assert max_connections(8, provisioned=True) == 1000 and max_connections(1, provisioned=True) == 1000
    assert check_connection_budget(8, sink_tasks=900, provisioned=True).cap == 1000
    with pytest.raises(ConnectionBudgetExceeded, match="of 1000 connections"):
        check_connection_budget(8, sink_tasks=1000, provisioned=True)  # fits the 1,678 of 8 CU Autoscaling
    with pytest.raises(ValueError):
        max_connections(0, provisioned=True)
    budget = check_connection_budget(1, sink_tasks=8, app_pool_max=20, app_replicas=3)
    assert budget.planned == 8 + 60 + 10 and budget.spare == 209 - 78
    with pytest.raises(ConnectionBudgetExceeded, match="200 sink tasks"):
        check_connection_budget(0.5, sink_tasks=200)
    with pytest.raises(ValueError):
        check_connection_budget(1, sink_tasks=-1)
    with pytest.raises(ValueError):
        max_connections(0.25)


def test_writer_is_picklable_and_fresh_after_unpickling(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, max_dwell_ms=100)
    w.open(0, 0)
    try:
        clone = pickle.loads(pickle.dumps(w))  # even while open: the connection is not pickled
    finally:
        w.close(None)
    assert clone._target is None and clone._flusher is None and clone.metrics.rows_received == 0
    run(clone, [{"id": 1, "version": 1, "name": "p"}])
    assert isinstance(psycopg.__version__, str)
    assert table_rows(pg_conn, table_name) == [(1, 1, "p")]


def test_version_guard_with_null_versions(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    # Stored rows: id 1 has a null version, id 2 has version 5.
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 1, "version": None, "name": "null-v"}, {"id": 2, "version": 5, "name": "v5"}])
    assert table_rows(pg_conn, table_name) == [(1, None, "null-v"), (2, 5, "v5")]
    # A versioned row replaces a stored null version (t.v IS NULL); an incoming null version
    # does not replace a stored version (t.v < NULL is not true); a new key with a null
    # version is inserted.
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 1, "version": 3, "name": "v3"}, {"id": 2, "version": None, "name": "null-in"},
         {"id": 3, "version": None, "name": "new-null"}])
    assert table_rows(pg_conn, table_name) == [(1, 3, "v3"), (2, 5, "v5"), (3, None, "new-null")]
    # The statement lets a null version replace a stored null version (t.v IS NULL holds).
    run(writer(pg_dsn, table_name, version_column="version"), [{"id": 3, "version": None, "name": "null-again"}])
    assert table_rows(pg_conn, table_name)[-1] == (3, None, "null-again")
    # Inside one flush a null version never displaces a buffered row, and a versioned row
    # displaces a buffered null one.
    run(writer(pg_dsn, table_name, version_column="version"),
        [{"id": 4, "version": 1, "name": "v1"}, {"id": 4, "version": None, "name": "null-after"},
         {"id": 5, "version": None, "name": "null-first"}, {"id": 5, "version": 2, "name": "v2"}])
    assert table_rows(pg_conn, table_name)[-2:] == [(4, 1, "v1"), (5, 2, "v2")]


@pytest.mark.parametrize("mode", ["upsert", "insert_ignore"])
def test_array_columns_are_written_by_the_unnest_modes(pg_dsn, pg_conn, table_name, mode):
    # unnest would flatten an array of arrays: array columns travel as text and are cast per row.
    make_table(pg_conn, table_name, {"id": "bigint", "tags": "text[]", "grid": "integer[]"})
    rows = [{"id": 1, "tags": ["a", "b,c", 'q"uote', None], "grid": [[1, 2], [3, 4]]},
            {"id": 2, "tags": [], "grid": None}]
    run(writer(pg_dsn, table_name, mode=mode), rows)
    assert table_rows(pg_conn, table_name) == [(1, ["a", "b,c", 'q"uote', None], [[1, 2], [3, 4]]), (2, [], None)]


def test_append_writes_array_columns(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "tags": "text[]"}, key=())
    run(writer(pg_dsn, table_name, mode="append"), [{"id": 1, "tags": ["a", "b"]}, {"id": 2, "tags": []}])
    assert table_rows(pg_conn, table_name) == [(1, ["a", "b"]), (2, [])]


def test_schema_dot_table_is_read_as_sql_reads_it(pg_dsn, pg_conn, table_name):
    schema = f"s_{table_name}"
    pg_conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    pg_conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier("My.Schema " + table_name)))
    try:
        make_table(pg_conn, "events", schema=schema)
        make_table(pg_conn, "T x", schema="My.Schema " + table_name)
        run(writer(pg_dsn, f"{schema}.events"), [{"id": 1, "version": 1, "name": "plain"}])
        run(writer(pg_dsn, f"{schema.upper()}.Events"), [{"id": 2, "version": 1, "name": "folded"}])
        run(writer(pg_dsn, f'"My.Schema {table_name}"."T x"'), [{"id": 3, "version": 1, "name": "quoted"}])
        run(writer(pg_dsn, "T x", schema="My.Schema " + table_name), [{"id": 4, "version": 1, "name": "exact"}])
        assert table_rows(pg_conn, "events", schema=schema) == [(1, 1, "plain"), (2, 1, "folded")]
        assert table_rows(pg_conn, "T x", schema="My.Schema " + table_name) == [(3, 1, "quoted"), (4, 1, "exact")]
        assert SinkSettings(table='"A""b".c').schema == 'A"b'
        for bad, reason in (("a b", "unexpected ' '"), ("a.b.c", "at most schema.table"), ('"x', "not closed"),
                            ("a.", "expected a name"), ("", "non-empty")):
            with pytest.raises(ValueError, match=reason):
                SinkSettings(table=bad)
    finally:
        for name in (schema, "My.Schema " + table_name):
            pg_conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def test_one_way_to_build_a_writer_and_mode_is_typed():
    import typing

    import rtm_lakebase.sink.writer as sink

    assert not hasattr(sink, "writer_for")
    with pytest.raises(TypeError):
        PostgresForeachWriter("host=x", table="t")
    with pytest.raises(TypeError):
        PostgresForeachWriter("host=x")
    mode = typing.get_type_hints(SinkSettings)["mode"]
    assert typing.get_origin(mode) is typing.Literal
    assert set(typing.get_args(mode)) == {"upsert", "insert_ignore", "append"}
