"""The latency probe: nearest-rank statistics, the recording writer, and a real RTM run."""

import pickle
import time

import pytest
from pyspark.sql import Row

from pack_lab.latency_probe import (
    LatencyRecordingWriter,
    format_report,
    latency_report,
    percentile,
    read_samples,
    stamp_rows,
    summarize,
    with_plan_time,
)


def test_percentile_is_nearest_rank():
    values = [15, 20, 35, 40, 50]
    assert percentile(values, 5) == 15
    assert percentile(values, 30) == 20
    assert percentile(values, 40) == 20
    assert percentile(values, 50) == 35
    assert percentile(values, 100) == 50
    assert percentile(values, 0) == 15
    # order of input does not matter
    assert percentile(list(reversed(values)), 50) == 35
    hundred = list(range(1, 101))
    assert [percentile(hundred, q) for q in (50, 90, 95, 99)] == [50, 90, 95, 99]


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="q must be"):
        percentile([1], 101)


def test_summarize_and_report_legs():
    assert summarize([]) == {"count": 0}
    s = summarize([3, 1, 2])
    assert (s["count"], s["min"], s["p50"], s["max"]) == (3, 1, 2, 3)
    samples = [(1000, 1005, 1100), (2000, 2010, 2300), (3000, 3001, 3002)]
    report = latency_report(samples)
    assert report["count"] == 3
    assert report["source_to_plan"]["max"] == 10
    assert report["plan_to_sink"]["p50"] == 95
    assert report["source_to_sink"]["min"] == 2
    assert report["source_to_sink"]["max"] == 300
    text = format_report(report)
    assert "source_to_sink" in text and "samples: 3" in text


def test_writer_pickles_records_and_skips_unstamped_rows(tmp_path):
    writer = pickle.loads(pickle.dumps(LatencyRecordingWriter(tmp_path / "lat")))
    assert writer.open(3, 9) is True
    before = int(time.time() * 1000)
    writer.process(Row(id=1, source_ms=before - 50, plan_ms=before - 20))
    writer.process({"id": 2, "source_ms": None, "plan_ms": before})
    writer.close(None)
    files = list((tmp_path / "lat").glob("lat-3-9-*.csv"))
    assert len(files) == 1
    samples = read_samples(tmp_path / "lat")
    assert len(samples) == 1
    source, plan, sink = samples[0]
    assert (source, plan) == (before - 50, before - 20)
    assert sink >= before


def test_stamp_rows_copies_and_stamps():
    rows = [{"id": 1}, {"id": 2}]
    stamped = stamp_rows(rows)
    assert rows == [{"id": 1}, {"id": 2}]
    assert stamped[0]["source_ms"] == stamped[1]["source_ms"] > 0


@pytest.mark.spark
def test_probe_on_a_real_time_query(spark, tmp_path, checkpoint):
    from pack_lab.rtm_lab import RealTimeMemorySource

    source = RealTimeMemorySource(spark, "id INT, source_ms BIGINT")
    probed = with_plan_time(source.dataframe())
    out = tmp_path / "lat"
    query = (probed.writeStream.foreach(LatencyRecordingWriter(out))
             .outputMode("update").trigger(realTime="5 seconds")
             .option("checkpointLocation", checkpoint).start())
    try:
        sent = 0
        for _ in range(3):
            source.add(stamp_rows([{"id": sent + i} for i in range(5)]))
            sent += 5
            time.sleep(0.4)
        deadline = time.monotonic() + 60
        while len(read_samples(out)) < sent:
            assert query.isActive, f"query died: {query.exception()}"
            assert time.monotonic() < deadline, f"only {len(read_samples(out))} of {sent} samples"
            time.sleep(0.2)
    finally:
        query.stop()
    samples = read_samples(out)
    assert len(samples) == sent
    skew_ms = 5  # same machine: the JVM and Python read the same wall clock
    for source_ms, plan_ms, sink_ms in samples:
        assert plan_ms >= source_ms - skew_ms
        assert sink_ms >= plan_ms - skew_ms
    # The plan clock is evaluated per row: chunks sent 400 ms apart get different stamps.
    assert len({plan for _s, plan, _k in samples}) >= 3
    report = latency_report(samples)
    for leg in ("source_to_plan", "plan_to_sink", "source_to_sink"):
        assert report[leg]["count"] == sent
        assert report[leg]["p50"] <= report[leg]["p90"] <= report[leg]["p95"] \
            <= report[leg]["p99"] <= report[leg]["max"]
