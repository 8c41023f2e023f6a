"""Each pipeline as a real query on the lab source fed by the simulator, checked against plain Python.

Real-time queries are checked exactly: every test waits until the query's
progress reports all fed rows as input (so the long batch holding them has
ended and the ``foreach`` writer has flushed), then compares the whole output
with the ``expected_*`` functions in ``pack_lab/oracles.py``.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from examples import real_time_pipelines as P
from pack_lab import oracles
from pack_lab.file_sink import JsonLinesForeachWriter, read_rows
from pack_lab.upstream_simulator import EVENT_SCHEMA_DDL, UpstreamFeeder, UpstreamSpec, generate_rows

pytestmark = pytest.mark.spark

#: A fixed event clock (a whole second, so 1-second windows line up with it).
T0 = 1_700_000_000_000


def _source(spark, partitions=2):
    from pack_lab.rtm_lab import RealTimeMemorySource

    return RealTimeMemorySource(spark, EVENT_SCHEMA_DDL, num_partitions=partitions)


def _ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def _progress_total(query, field="numInputRows"):
    return sum(p[field] for p in query.recentProgress)


def _state(query, field):
    return [p["stateOperators"][0][field] for p in query.recentProgress if p["stateOperators"]]


def wait_until(predicate, query, timeout=120.0, what="condition"):
    """Poll ``predicate()``; fail fast if the query dies."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if not query.isActive:
            raise AssertionError(f"query died while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; progress: {query.recentProgress[-3:]}")
        time.sleep(0.25)


def wait_all_input(query, rows_sent, timeout=120.0):
    """Until progress has counted every row fed: the batches holding them have ended and flushed."""
    wait_until(lambda: _progress_total(query) >= rows_sent, query, timeout, f"{rows_sent} input rows")


def feed(source, spec, timeout=60.0):
    feeder = UpstreamFeeder(source, spec, keep_rows=True).start()
    feeder.join(timeout=timeout)
    return feeder.sent_rows


def test_ingest_time_pass_through(spark, tmp_path, checkpoint):
    from pyspark.sql import functions as F

    source = _source(spark)
    df = P.with_ingest_time(source.dataframe()).withColumn(
        "batch_ts", F.unix_millis(F.current_timestamp()))
    query = P.start_real_time(df, JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        sent = feed(source, UpstreamSpec(rows_per_second=400, total_rows=800, duplicate_pct=10,
                                         num_partitions=2, num_keys=10, seed=1, start_ms=T0))
        wait_all_input(query, len(sent))
        rows = read_rows(tmp_path / "out")
        batches = len(query.recentProgress)
    finally:
        query.stop()
    assert sorted(r["seq"] for r in rows) == list(range(800))  # every row, duplicates included
    by_seq = {r["seq"]: r for r in rows}
    for original in sent:
        got = by_seq[original["seq"]]
        assert (got["event_id"], got["event_ms"], got["value"]) == (
            original["event_id"], original["event_ms"], original["value"])
        assert got["ingest_ms"] >= original["sent_ms"]  # stamped per row, after it was sent
    # current_timestamp() is one value per long batch; the reflect() clock moves per row.
    assert len({r["batch_ts"] for r in rows}) <= batches
    assert len({r["ingest_ms"] for r in rows}) > 10 * len({r["batch_ts"] for r in rows})


def test_dedup_emits_each_event_once(spark, tmp_path, checkpoint):
    source = _source(spark)
    query = P.start_real_time(P.dedup_events(source.dataframe()),
                              JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        sent = feed(source, UpstreamSpec(rows_per_second=400, total_rows=800, duplicate_pct=20,
                                         num_partitions=2, num_keys=10, seed=2, start_ms=T0))
        wait_all_input(query, len(sent))
        rows = read_rows(tmp_path / "out")
        state_rows = _state(query, "numRowsTotal")[-1]
    finally:
        query.stop()
    expected = oracles.expected_dedup(sent)
    assert len(expected) == 640  # 20 % of 800 rows were retries
    assert Counter(r["event_id"] for r in rows) == Counter(expected.keys())
    # The copy kept is the first one sent (a retry follows its original on the same partition).
    assert {r["event_id"]: r["seq"] for r in rows} == {k: v["seq"] for k, v in expected.items()}
    # Without a watermark the state holds every id seen, for ever.
    assert state_rows == 640


def test_bounded_dedup_evicts_state_and_drops_late_retries(spark, tmp_path, checkpoint):
    source = _source(spark, partitions=1)
    query = P.start_real_time(P.dedup_events_bounded(source.dataframe(), "5 seconds"),
                              JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        early = feed(source, UpstreamSpec(rows_per_second=400, total_rows=400, duplicate_pct=25,
                                          num_keys=5, seed=3, start_ms=T0))
        wait_all_input(query, len(early))
        assert max(_state(query, "numRowsTotal")) == 300
        # The watermark is fixed for a whole long batch: the batch that first saw these
        # event times still ran with the watermark from before them.
        first = next(p for p in query.recentProgress if p["numInputRows"] > 0)
        assert _ms(first["eventTime"]["watermark"]) < T0
        # Newer events (10 minutes on) move the watermark; they trickle in until the
        # early ids' state is evicted at a batch end.
        later_spec = UpstreamSpec(rows_per_second=5, num_keys=5, seed=4, id_prefix="later",
                                  start_ms=T0 + 600_000)
        with UpstreamFeeder(source, later_spec, keep_rows=True) as later:
            wait_until(lambda: sum(_state(query, "numRowsRemoved")) >= 300, query, what="eviction")
            fed_so_far = len(early) + later.stats().rows_sent
        # A retry of an early event now arrives behind the watermark: dropped as late,
        # not emitted again and not re-added to state.
        retry = dict(early[0], seq=10_000, sent_ms=int(time.time() * 1000))
        source.add([retry])
        wait_until(lambda: sum(_state(query, "numRowsDroppedByWatermark")) >= 1, query,
                   what="late retry dropped")
        later_rows = later.sent_rows
        wait_all_input(query, len(early) + len(later_rows) + 1)
        rows = read_rows(tmp_path / "out")
    finally:
        query.stop()
    assert fed_so_far >= len(early)
    expected = oracles.expected_dedup(early + later_rows)
    assert Counter(r["event_id"] for r in rows) == Counter(expected.keys())
    assert not any(r["seq"] == 10_000 for r in rows)


def test_window_stats_match_python_and_watermark_evicts(spark, tmp_path, checkpoint):
    source = _source(spark)
    query = P.start_real_time(P.windowed_device_stats(source.dataframe(), "1 second", "5 seconds"),
                              JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        sent = feed(source, UpstreamSpec(rows_per_second=400, total_rows=800, duplicate_pct=10,
                                         num_partitions=2, num_keys=4, seed=5, start_ms=T0))
        wait_all_input(query, len(sent))
        rows = read_rows(tmp_path / "out")
        expected = oracles.expected_window_stats(sent, 1000)
        windows = len(expected)
        assert max(_state(query, "numRowsTotal")) == windows
        # Move the watermark 10 minutes on; closed windows leave the state at a batch end.
        later_spec = UpstreamSpec(rows_per_second=5, num_keys=4, seed=6, id_prefix="later",
                                  start_ms=T0 + 600_000, num_partitions=2)
        with UpstreamFeeder(source, later_spec):
            wait_until(lambda: sum(_state(query, "numRowsRemoved")) >= windows, query,
                       what="window eviction")
        late = dict(sent[0], seq=10_000)
        source.add([late])
        wait_until(lambda: sum(_state(query, "numRowsDroppedByWatermark")) >= 1, query,
                   what="late row dropped")
        after = read_rows(tmp_path / "out")
    finally:
        query.stop()
    # Update mode: one updated row per input row; the newest per window is the exact total.
    assert len(rows) == len(sent)
    newest = oracles.latest_updates(rows, ("device_id", "window_start_ms"))
    got = {k: (r["events"], r["value_sum"], r["value_max"]) for k, r in newest.items()}
    assert got == expected
    # The late row changed nothing: it produced no output row for its (closed) window, and no
    # update for that window went beyond the final count.
    key = (late["device_id"], late["event_ms"] - late["event_ms"] % 1000)
    for_key = [r for r in after if (r["device_id"], r["window_start_ms"]) == key]
    assert len(for_key) == sum(1 for r in rows if (r["device_id"], r["window_start_ms"]) == key)
    assert max(r["events"] for r in for_key) == expected[key][0]


def test_device_totals_aggregate_real_time(spark, tmp_path, checkpoint):
    source = _source(spark)
    query = P.start_real_time(P.device_totals_aggregate(source.dataframe()),
                              JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        sent = feed(source, UpstreamSpec(rows_per_second=400, total_rows=600, duplicate_pct=10,
                                         num_partitions=2, num_keys=6, seed=7, start_ms=T0))
        wait_all_input(query, len(sent))
        rows = read_rows(tmp_path / "out")
    finally:
        query.stop()
    newest = oracles.latest_updates(rows, ("device_id",))
    got = {k[0]: (r["events"], r["value_sum"], r["last_event_ms"]) for k, r in newest.items()}
    assert got == oracles.expected_device_totals(sent)


@pytest.mark.parametrize("pipeline", [P.device_totals_stateful, P.device_totals_stateful_pandas],
                         ids=["transformWithState", "transformWithStateInPandas"])
def test_transform_with_state_in_micro_batch(spark, tmp_path, checkpoint, pipeline):
    source = _source(spark, partitions=1)
    query = P.start_micro_batch(pipeline(source.dataframe()),
                                JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        first = generate_rows(UpstreamSpec(num_keys=4, duplicate_pct=10, seed=8), 200,
                              start_ms=T0, sent_ms=0)
        source.add(first)
        wait_all_input(query, 200, timeout=180)
        second = generate_rows(UpstreamSpec(num_keys=4, seed=9, id_prefix="b"), 100,
                               start_ms=T0 + 10_000, sent_ms=0)
        for row in second:
            row["seq"] += 200
        source.add(second)
        wait_all_input(query, 300, timeout=180)
        rows = read_rows(tmp_path / "out")
    finally:
        query.stop()
    newest = oracles.latest_updates(rows, ("device_id",))
    got = {k[0]: (r["events"], r["value_sum"], r["last_event_ms"]) for k, r in newest.items()}
    # State carried across micro-batches: the totals cover both batches.
    assert got == oracles.expected_device_totals(first + second)


def test_transform_with_state_is_rejected_in_real_time_mode(spark, tmp_path, checkpoint):
    source = _source(spark, partitions=1)
    query = P.start_real_time(P.device_totals_stateful(source.dataframe()),
                              JsonLinesForeachWriter(tmp_path / "out"), checkpoint)
    try:
        source.add(generate_rows(UpstreamSpec(num_keys=2, seed=10), 10, start_ms=T0, sent_ms=0))
        deadline = time.monotonic() + 120
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.25)
        alive = query.isActive
        error = query.exception()
    finally:
        query.stop()
    assert not alive, "the PySpark transformWithState query kept running in real-time mode"
    assert error is not None
    assert read_rows(tmp_path / "out") == []


def test_support_table_matches_what_the_tests_show():
    assert {name for name, s in P.PIPELINES.items() if not s.oss_rtm} == {
        "device_totals_stateful", "device_totals_stateful_pandas"}
    assert all(s.databricks_rtm for s in P.PIPELINES.values())
    assert all(callable(getattr(P, name)) for name in P.PIPELINES)


def test_expected_helpers_on_a_hand_example():
    rows = [
        {"event_id": "a", "device_id": "d1", "event_ms": 1_000, "value": 1.0, "seq": 0},
        {"event_id": "b", "device_id": "d1", "event_ms": 1_500, "value": 3.0, "seq": 1},
        {"event_id": "a", "device_id": "d1", "event_ms": 1_000, "value": 1.0, "seq": 2},
        {"event_id": "c", "device_id": "d2", "event_ms": 2_100, "value": 2.5, "seq": 3},
    ]
    assert list(oracles.expected_dedup(rows)) == ["a", "b", "c"]
    assert oracles.expected_window_stats(rows, 1000) == {("d1", 1000): (3, 5.0, 3.0), ("d2", 2000): (1, 2.5, 2.5)}
    assert oracles.expected_device_totals(rows) == {"d1": (3, 5.0, 1_500), "d2": (1, 2.5, 2_100)}
    updates = [{"k": "x", "events": 1}, {"k": "x", "events": 3}, {"k": "x", "events": 2}]
    assert oracles.latest_updates(updates, ("k",))[("x",)]["events"] == 3


@pytest.mark.postgres
def test_window_stats_upserted_to_postgres_with_a_count_version(spark, tmp_path, checkpoint,
                                                                pg_dsn, pg_conn, table_name):
    """The reference's recipe: group key as primary key, ``events`` as the version column."""
    from psycopg import sql

    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    pg_conn.execute(sql.SQL(
        "CREATE TABLE {} (device_id text NOT NULL, window_start_ms bigint NOT NULL, "
        "window_end_ms bigint NOT NULL, events bigint NOT NULL, value_sum double precision NOT NULL, "
        "value_max double precision NOT NULL, PRIMARY KEY (device_id, window_start_ms))"
    ).format(sql.Identifier(table_name)))
    writer = PostgresForeachWriter(pg_dsn, SinkSettings(
        table=table_name, mode="upsert", key_columns=("device_id", "window_start_ms"),
        version_column="events"))
    source = _source(spark)
    query = P.start_real_time(P.windowed_device_stats(source.dataframe(), "1 second", "1 hour"),
                              writer, checkpoint)
    select = sql.SQL("SELECT device_id, window_start_ms, events, value_sum, value_max FROM {}").format(
        sql.Identifier(table_name))

    def table():
        return {(d, w): (n, s, m) for d, w, n, s, m in pg_conn.execute(select).fetchall()}

    try:
        sent = feed(source, UpstreamSpec(rows_per_second=400, total_rows=600, duplicate_pct=10,
                                         num_partitions=2, num_keys=4, seed=11, start_ms=T0))
        expected = oracles.expected_window_stats(sent, 1000)
        wait_all_input(query, len(sent))
        wait_until(lambda: table() == expected, query, timeout=30, what="table equal to expected")
    finally:
        query.stop()
    # One row per (device, window) holding the final totals, although 600 updates were emitted.
    assert table() == expected
