"""The upstream simulator: exact duplicate arithmetic, determinism, pacing, and feeding a real RTM query."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from pack_lab.upstream_simulator import (
    EVENT_COLUMNS,
    CountingSink,
    EventGenerator,
    UpstreamFeeder,
    UpstreamSpec,
    duplicates_in_first,
    expected_counts,
    generate_rows,
    partition_for,
)


class RecordingSink:
    """Keeps every add() call: (partition, rows, monotonic time)."""

    def __init__(self, num_partitions: int = 1, delay_s: float = 0.0):
        self.num_partitions = num_partitions
        self.delay_s = delay_s
        self.calls: list[tuple[int | None, list[dict], float]] = []
        self.lock = threading.Lock()

    def add(self, rows, partition=None):
        rows = list(rows)
        if self.delay_s:
            time.sleep(self.delay_s)
        with self.lock:
            self.calls.append((partition, rows, time.monotonic()))
        return len(rows)

    @property
    def rows(self) -> list[dict]:
        return [row for _, rows, _ in self.calls for row in rows]


@pytest.mark.parametrize("pct,n", [(0, 1000), (10, 1000), (12.5, 8000), (33.3, 999), (99, 100)])
def test_duplicate_count_is_exact(pct, n):
    rows = generate_rows(UpstreamSpec(duplicate_pct=pct, num_keys=7, seed=3), n, start_ms=0)
    counts = Counter(r["event_id"] for r in rows)
    duplicates = sum(c - 1 for c in counts.values())
    assert (duplicates, len(counts)) == expected_counts(n, pct)
    assert duplicates == int(n * pct / 100 + 1e-9)


def test_duplicate_is_a_later_copy_of_an_earlier_event():
    rows = generate_rows(UpstreamSpec(duplicate_pct=20, seed=11, duplicate_window=50), 2000, start_ms=0)
    first: dict[str, dict] = {}
    for row in rows:
        original = first.setdefault(row["event_id"], row)
        if original is not row:
            # Same event, re-sent later: only seq (and sent_ms, when fed) differ.
            assert row["seq"] > original["seq"]
            for col in ("device_id", "event_ms", "value", "payload"):
                assert row[col] == original[col]
    # duplicate_window bounds how far back a retry reaches (in distinct events).
    order = {eid: i for i, eid in enumerate(first)}
    seen = 0
    for row in rows:
        if row is first[row["event_id"]]:
            seen += 1
        else:
            assert seen - order[row["event_id"]] <= 50


def test_same_seed_same_rows_other_seed_other_rows():
    spec = UpstreamSpec(duplicate_pct=5, num_keys=20, payload_bytes=40, seed=42)
    a = generate_rows(spec, 500, start_ms=1_000)
    b = generate_rows(spec, 500, start_ms=1_000)
    c = generate_rows(UpstreamSpec(duplicate_pct=5, num_keys=20, payload_bytes=40, seed=43), 500, start_ms=1_000)
    assert a == b
    assert [r["device_id"] for r in a] != [r["device_id"] for r in c]


def test_row_shape_keys_payload_and_event_clock():
    spec = UpstreamSpec(rows_per_second=200, num_keys=5, payload_bytes=33, seed=1)
    rows = generate_rows(spec, 400, start_ms=10_000)
    assert all(set(r) == set(EVENT_COLUMNS) for r in rows)
    assert {r["device_id"] for r in rows} == {f"device-{k:05d}" for k in range(5)}
    assert all(len(r["payload"]) == 33 for r in rows)
    assert all((r["value"] * 4).is_integer() for r in rows)  # exact float sums
    assert [r["seq"] for r in rows] == list(range(400))
    # 200 rows/s: row seq is due at start + seq * 5 ms.
    assert [r["event_ms"] for r in rows[:4]] == [10_000, 10_005, 10_010, 10_015]
    assert rows[-1]["event_ms"] == 10_000 + 399 * 5


def test_spec_validation_and_row_limit():
    assert UpstreamSpec(rows_per_second=500, duration_s=3).row_limit == 1500
    assert UpstreamSpec(total_rows=10, duration_s=3).row_limit == 10
    assert UpstreamSpec().row_limit is None
    for bad in ({"duplicate_pct": 100}, {"rows_per_second": 0}, {"num_keys": 0}, {"num_partitions": 0}):
        with pytest.raises(ValueError):
            UpstreamSpec(**bad)
    assert duplicates_in_first(1, 99) == 0  # the first row can never be a duplicate


def test_feeder_paces_at_the_target_rate_in_small_chunks():
    sink = RecordingSink()
    spec = UpstreamSpec(rows_per_second=2000, total_rows=3000, duplicate_pct=10, seed=5)
    feeder = UpstreamFeeder(sink, spec, max_chunk_rows=100)
    before = time.monotonic()
    stats = feeder.start().join(timeout=120)  # a generous bound: catches a hang only
    assert stats.done and stats.rows_sent == 3000
    assert (stats.duplicates_sent, stats.distinct_events) == expected_counts(3000, 10)
    # 3000 rows at 2000 rows/s cannot take less than 1.5 s, however fast or loaded the machine (a slow machine
    # only falls behind, which the feeder then catches up in chunks of 100).
    assert stats.elapsed_s >= 1.5 - 0.02, stats
    assert max(len(rows) for _, rows, _ in sink.calls) <= 100
    assert [r["seq"] for r in sink.rows] == list(range(3000))
    # Paced, never ahead: at every hand-over no more rows had been sent than the rate allows since the start.
    sent = 0
    for _, rows, t in sink.calls:
        sent += len(rows)
        assert sent <= 2000 * (t - before), (sent, t - before)
    assert len(sink.calls) >= 3000 // 100


def test_feeder_routes_keys_to_stable_partitions_and_stamps_sent_ms():
    sink = RecordingSink(num_partitions=3)
    spec = UpstreamSpec(rows_per_second=5000, total_rows=600, num_partitions=3, num_keys=30, seed=9)
    before = int(time.time() * 1000)
    UpstreamFeeder(sink, spec, keep_rows=True).start().join(timeout=60)
    after = int(time.time() * 1000)
    for partition, rows, _ in sink.calls:
        assert {partition_for(r["device_id"], 3) for r in rows} == {partition}
    assert {p for p, _, _ in sink.calls} == {0, 1, 2}
    assert all(before <= r["sent_ms"] <= after for r in sink.rows)
    # A duplicate is re-sent later than its original.
    first_sent: dict[str, int] = {}
    for row in sorted(sink.rows, key=lambda r: r["seq"]):
        assert row["sent_ms"] >= first_sent.setdefault(row["event_id"], row["sent_ms"])


def test_feeder_rows_match_the_generator_so_expected_output_can_be_recomputed():
    spec = UpstreamSpec(rows_per_second=4000, total_rows=800, duplicate_pct=15, seed=21, start_ms=5_000)
    sink = RecordingSink()
    feeder = UpstreamFeeder(sink, spec, keep_rows=True)
    feeder.start().join(timeout=60)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "sent_ms"} for r in rows]
    assert strip(sink.rows) == strip(generate_rows(spec))
    assert feeder.sent_rows == sink.rows


def test_stop_ends_an_open_ended_run_and_progress_is_reported():
    seen = []
    sink = CountingSink()
    feeder = UpstreamFeeder(sink, UpstreamSpec(rows_per_second=1000), on_progress=seen.append,
                            progress_every_s=0.1)
    feeder.start()
    time.sleep(0.5)
    feeder.stop()
    stats = feeder.join(timeout=60)
    assert not feeder.running and stats.done
    assert stats.rows_sent == sink.rows_added > 0
    assert len(seen) >= 3 and seen[-1].done
    assert [s.rows_sent for s in seen] == sorted(s.rows_sent for s in seen)
    assert "rows/s" in stats.line()


def test_feeder_falls_behind_a_slow_sink_instead_of_building_huge_chunks():
    sink = RecordingSink(delay_s=0.05)
    feeder = UpstreamFeeder(sink, UpstreamSpec(rows_per_second=20_000, total_rows=4000), max_chunk_rows=200)
    feeder.start()
    time.sleep(0.3)
    behind = feeder.stats().behind_rows
    feeder.join(timeout=60)
    assert behind > 0
    assert max(len(rows) for _, rows, _ in sink.calls) <= 200
    assert len(sink.rows) == 4000


def test_sink_errors_surface_in_join():
    class Broken(RecordingSink):
        def add(self, rows, partition=None):
            raise OSError("py4j gateway gone")

    feeder = UpstreamFeeder(Broken(), UpstreamSpec(rows_per_second=1000, total_rows=100))
    feeder.start()
    with pytest.raises(RuntimeError, match="gateway gone"):
        feeder.join(timeout=60)


def test_partition_count_must_match_the_source():
    with pytest.raises(ValueError, match="partitions"):
        UpstreamFeeder(RecordingSink(num_partitions=2), UpstreamSpec(num_partitions=1))


def test_generator_defaults_its_clock_to_now():
    before = int(time.time() * 1000)
    row = EventGenerator(UpstreamSpec()).next_row()
    assert before <= row["event_ms"] <= int(time.time() * 1000)


@pytest.mark.spark
def test_feeds_a_real_time_query_exactly(spark, tmp_path, checkpoint):
    from pack_lab.file_sink import JsonLinesForeachWriter, wait_for_rows
    from pack_lab.rtm_lab import RealTimeMemorySource
    from pack_lab.upstream_simulator import EVENT_SCHEMA_DDL

    spec = UpstreamSpec(rows_per_second=500, total_rows=1000, duplicate_pct=10, num_partitions=2,
                        num_keys=20, payload_bytes=100, seed=13)
    source = RealTimeMemorySource(spark, EVENT_SCHEMA_DDL, num_partitions=2)
    out = tmp_path / "out"
    query = (source.dataframe().select("event_id", "seq", "sent_ms").writeStream
             .foreach(JsonLinesForeachWriter(out)).outputMode("update")
             .trigger(realTime="5 seconds").option("checkpointLocation", checkpoint).start())
    try:
        feeder = UpstreamFeeder(source, spec, keep_rows=True).start()
        stats = feeder.join(timeout=30)
        rows = wait_for_rows(out, 1000, timeout=60, query=query)
    finally:
        query.stop()
    assert stats.rows_sent == source.rows_added == 1000
    assert sorted(r["seq"] for r in rows) == list(range(1000))
    assert Counter(r["event_id"] for r in rows) == Counter(r["event_id"] for r in feeder.sent_rows)
    assert len({r["event_id"] for r in rows}) == stats.distinct_events == 900
