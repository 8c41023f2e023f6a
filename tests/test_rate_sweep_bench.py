"""The rate sweep benchmark: a quick run through its CLI, the verdict logic, and docs equal to its JSON."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import pytest

from benchmarks import rate_sweep

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "rate_sweep.json"


def check_shape(results: dict) -> None:
    assert results["benchmark"] == "rate_sweep"
    assert results["percentile_method"] == "nearest-rank"
    assert {"cores", "spark_master", "pyspark", "python", "load_average_1m_at_start"} <= set(results["machine"])
    assert {"met", "verdict", "p50_ms", "p99_ms", "rate", "path"} <= set(results["target"])
    for point in results["points"]:
        assert point["path"] in rate_sweep.PATHS
        if "visible" not in point:
            assert point.get("skipped") or point.get("error"), point
            continue
        for leg in ("visible", "engine", "sink"):
            stats = point[leg]
            assert stats["count"] == point["rows_landed"]
            assert stats["min"] <= stats["p50"] <= stats["p95"] <= stats["p99"] <= stats["max"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.postgres
def test_quick_sweep_lands_every_row_on_every_path(spark, pg_dsn, tmp_path, capsys):
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
    out = tmp_path / "sweep.json"
    assert rate_sweep.main(["--quick", "--seconds", "2", "--trigger", "5 seconds", "--output", str(out)],
                           spark=spark, dsn=pg_dsn) == 0
    results = json.loads(out.read_text())
    check_shape(results)
    assert [(p["path"], p["rate"]) for p in results["points"]] == [
        ("rtm-python", 200), ("rtm-fast-foreach", 200), ("rtm-jvm", 200), ("microbatch", 200)]
    for point in results["points"]:
        if (point["path"] == "rtm-jvm" and not jvm_built) or (point["path"] == "rtm-fast-foreach" and not fast_built):
            assert point["skipped"]
            continue
        assert "error" not in point, point
        assert point["rows_landed"] == point["rows_sent"] > 0, point
        assert point["visible"]["p50"] >= point["engine"]["p50"] >= 0
        assert point["cpu_s_per_1000_rows"] > 0 and point["load_average_1m"] is not None
    assert results["target"]["verdict"].startswith("NOT MEASURED")  # 1,000 rows/s was not run
    assert results["fast_foreach_target"]["verdict"].startswith("NOT MEASURED")
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    printed = capsys.readouterr().out
    assert "visible p50" in printed and "target (JVM sink" in printed
    assert not spark.streams.active


def synthetic(p50: float, p99: float, landed: int = 100, sent: int = 100) -> dict:
    stats = {"count": landed, "min": 1, "p50": p50, "p90": p99, "p95": p99, "p99": p99, "max": p99}
    return {"points": [{"path": "rtm-jvm", "rate": 1000, "rows_sent": sent, "rows_landed": landed,
                        "visible": stats, "engine": stats}]}


@pytest.mark.parametrize(("p50", "p99", "landed", "met", "words"), [
    (15, 90, 100, True, ["MET"]),
    (20, 100, 100, True, ["MET"]),            # the limits are inclusive
    (21, 90, 100, False, ["MISSED", "p50 21 ms > 20 ms"]),
    (15, 101, 100, False, ["MISSED", "p99 101 ms > 100 ms"]),
    (15, 90, 99, False, ["MISSED", "99 of 100 rows"]),  # fast but lossy is not a pass
])
def test_verdict(p50, p99, landed, met, words):
    target = rate_sweep.verdict(synthetic(p50, p99, landed))
    assert target["met"] is met
    for word in words:
        assert word in target["verdict"]


def _max_point(path: str, sustained: float, landed: int = 100) -> dict:
    stats = {"count": landed, "min": 1, "p50": 5, "p90": 9, "p95": 9, "p99": 9, "max": 9}
    return {"path": path, "rate": 9000, "is_max": True, "rows_sent": 100, "rows_landed": landed,
            "sustained_rows_per_s": sustained, "visible": stats, "engine": stats}


@pytest.mark.parametrize(("fast", "stock", "landed", "met"), [
    (5000, 4000, 100, True), (4000, 4000, 100, True), (3999, 4000, 100, False), (5000, 4000, 99, False)])
def test_fast_verdict_compares_the_highest_sustained_rate_with_stock(fast, stock, landed, met):
    results = synthetic(15, 90)
    results["points"][0]["path"] = "rtm-fast-foreach"
    results["points"] += [_max_point("rtm-fast-foreach", fast, landed), _max_point("rtm-python", stock)]
    target = rate_sweep.fast_verdict(results)
    assert target["met"] is True  # p50/p99 at 1,000 rows/s
    assert target["sustained_met"] is met
    assert target["sustained_verdict"].startswith("MET" if met else "MISSED")
    assert not rate_sweep.fast_verdict(synthetic(15, 90))["sustained_met"]  # no max points: not measured


def test_verdict_without_the_point_is_not_measured():
    results = synthetic(1, 1)
    results["points"][0].update(rate=200)
    assert rate_sweep.verdict(results)["verdict"].startswith("NOT MEASURED")
    skipped = {"points": [{"path": "rtm-jvm", "rate": 1000, "skipped": "no javac"}]}
    target = rate_sweep.verdict(skipped)
    assert not target["met"] and "no javac" in target["verdict"]


@pytest.mark.parametrize("text", ["0", "-5", "fast", "50,,200", "1e3", "100001"])
def test_bad_rates_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        rate_sweep.parse_rates(text)


def test_committed_results_have_the_full_sweep():
    results = json.loads(RESULTS.read_text())
    check_shape(results)
    assert results["quick"] is False
    rates = {p["rate"] for p in results["points"] if not p.get("is_max")}
    assert {50, 200, 1000} <= rates
    assert any(p.get("is_max") for p in results["points"]), "a point at the source's highest rate"
    assert {p["path"] for p in results["points"]} == set(rate_sweep.PATHS)
    assert results["target"] == rate_sweep.verdict(copy.deepcopy(results))  # the one its points give
    assert results["fast_foreach_target"] == rate_sweep.fast_verdict(copy.deepcopy(results))
    for point in results["points"]:
        if "visible" in point:
            assert point["cpu_s_per_1000_rows"] > 0 and point["load_average_1m"] is not None


@pytest.mark.parametrize("document", rate_sweep.TABLE_DOCUMENTS, ids=lambda p: p.name)
def test_documents_show_the_committed_figures(document):
    text = document.read_text(encoding="utf-8")
    start = text.index(rate_sweep.DOC_START) + len(rate_sweep.DOC_START)
    end = text.index(rate_sweep.DOC_END)
    expected = rate_sweep.markdown_table(json.loads(RESULTS.read_text()))
    assert text[start:end].strip() == expected.strip(), (
        f"{document.name} is out of date: run benchmarks/rate_sweep.py --update-docs")


def test_cpu_used_never_goes_negative_when_a_process_exits():
    # A Python worker that exited between the samples took its CPU with it: the plain difference of the two
    # sums was negative (-3.4 s per 1,000 rows in a CI run); per process it is a lower bound, never below zero.
    before = {1: 10.0, 2: 50.0}  # pid 2 (a worker) exits before the second sample
    after = {1: 12.5, 3: 0.5}  # pid 3 is new
    assert rate_sweep.cpu_used(before, after) == 3.0
    assert rate_sweep.cpu_used({1: 5.0}, {1: 4.0}) == 0.0


def test_tree_cpu_sees_this_process():
    import os

    assert os.getpid() in rate_sweep.tree_cpu(os.getpid())
