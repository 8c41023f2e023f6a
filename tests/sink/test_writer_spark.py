"""PostgresForeachWriter end to end through Spark: micro-batch and real-time mode, crash + restart, Postgres restart."""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from examples.upsert_query import start_upsert_query
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.sink.helpers import CrashingWriter, make_table, table_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SCHEMA = "id BIGINT, version BIGINT, name STRING"


def events(n_keys: int, versions: int) -> list[dict]:
    """Every key in several versions, newest not always last (replays arrive out of order)."""
    out = []
    for v in range(1, versions + 1):
        for k in range(n_keys):
            out.append({"id": k, "version": v, "name": f"k{k}-v{v}"})
    out.extend({"id": k, "version": 1, "name": "stale replay"} for k in range(0, n_keys, 3))
    return out


def expected(n_keys: int, versions: int) -> list[tuple]:
    return [(k, versions, f"k{k}-v{versions}") for k in range(n_keys)]


def wait_for_table(conn, table, want, query, timeout=90.0):
    deadline = time.monotonic() + timeout
    while True:
        got = table_rows(conn, table)
        if got == want:
            return got
        if not query.isActive:
            raise AssertionError(f"query stopped with {len(got)} rows: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"table has {len(got)} rows, want {len(want)}; first diff: "
                                 f"{next((g, w) for g, w in zip(got + [None] * len(want), want, strict=False) if g != w)}")
        time.sleep(0.3)


def write_json(folder, name, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def sink(dsn, table, **options):
    options.setdefault("version_column", "version")
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


def run_available_now(spark, folder, writer, checkpoint):
    query = (spark.readStream.schema(SCHEMA).json(str(folder)).writeStream.foreach(writer)
             .trigger(availableNow=True).option("checkpointLocation", checkpoint).start())
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return query


def test_micro_batch_writes_exactly_the_expected_rows(spark, pg_dsn, pg_conn, table_name, tmp_path, checkpoint):
    make_table(pg_conn, table_name)
    write_json(tmp_path / "in", "a.json", events(300, 2))
    write_json(tmp_path / "in", "b.json", events(300, 3)[600:])
    run_available_now(spark, tmp_path / "in", sink(pg_dsn, table_name), checkpoint)
    assert table_rows(pg_conn, table_name) == expected(300, 3)


def test_crash_mid_epoch_then_restart_from_checkpoint_converges(spark, pg_dsn, pg_conn, table_name,
                                                                tmp_path, checkpoint):
    make_table(pg_conn, table_name)
    write_json(tmp_path / "in", "a.json", events(200, 3))
    marker = tmp_path / "crash-once"
    marker.write_text("x")
    crashing = CrashingWriter(sink(pg_dsn, table_name, max_batch_rows=50, max_dwell_ms=0),
                              str(marker), crash_after=330)
    query = (spark.readStream.schema(SCHEMA).json(str(tmp_path / "in")).writeStream.foreach(crashing)
             .trigger(availableNow=True).option("checkpointLocation", checkpoint).start())
    try:
        with pytest.raises(Exception, match="simulated executor crash"):
            query.awaitTermination(180)
    finally:
        query.stop()
    partial = table_rows(pg_conn, table_name)
    assert 0 < len(partial) and partial != expected(200, 3)  # some flushes were committed
    # Restart from the same checkpoint: the uncommitted batch is replayed in full.
    run_available_now(spark, tmp_path / "in", sink(pg_dsn, table_name), checkpoint)
    assert table_rows(pg_conn, table_name) == expected(200, 3)  # 0 lost, 0 duplicated


def test_real_time_mode_writes_exactly_the_expected_rows(spark, pg_dsn, pg_conn, table_name, checkpoint):
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    query = (source.dataframe().writeStream.foreach(sink(pg_dsn, table_name, max_dwell_ms=100))
             .outputMode("update").trigger(realTime=MIN_REAL_TIME_TRIGGER)
             .option("checkpointLocation", checkpoint).start())
    try:
        rows = events(150, 2)
        source.add(rows[:200])
        source.add(rows[200:])
        wait_for_table(pg_conn, table_name, expected(150, 2), query)
    finally:
        query.stop()


def test_real_time_mode_survives_a_postgres_restart(spark, pg_server, table_name, checkpoint):
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        make_table(conn, table_name)
        source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
        query = (source.dataframe().writeStream
                 .foreach(sink(pg_server.dsn, table_name, max_dwell_ms=100))
                 .outputMode("update").trigger(realTime=MIN_REAL_TIME_TRIGGER)
                 .option("checkpointLocation", checkpoint).start())
        try:
            source.add(events(100, 1))
            wait_for_table(conn, table_name, expected(100, 1), query)
        except BaseException:
            query.stop()
            raise
    try:
        pg_server.restart(down_seconds=2)  # cuts the sink's connection under the running query
        source.add(events(100, 2)[100:])
        with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
            wait_for_table(conn, table_name, expected(100, 2), query)
    finally:
        query.stop()


@pytest.mark.parametrize("real_time", [False, True], ids=["micro_batch", "real_time"])
def test_start_upsert_query_as_shown_writes_exactly_the_expected_rows(spark, pg_dsn, pg_conn, table_name,
                                                                     checkpoint, real_time):
    """The reference's ``start_upsert_query``, run as shown, on the lab source in both trigger kinds."""
    make_table(pg_conn, table_name)
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    query = start_upsert_query(source.dataframe(), pg_dsn, table_name, checkpoint, real_time=real_time)
    try:
        rows = events(120, 3)  # older versions replayed out of order at the end
        source.add(rows[:150])
        source.add(rows[150:])
        wait_for_table(pg_conn, table_name, expected(120, 3), query)
        # Until progress has counted every row (their batches ended, the writer closed and
        # flushed): the stale replays read after the newest versions must not have won.
        deadline = time.monotonic() + 90
        while sum(p["numInputRows"] for p in query.recentProgress) < len(rows):
            assert query.isActive, f"query stopped: {query.exception()}"
            assert time.monotonic() < deadline, f"progress: {query.recentProgress[-2:]}"
            time.sleep(0.3)
        assert table_rows(pg_conn, table_name) == expected(120, 3)
    finally:
        query.stop()
