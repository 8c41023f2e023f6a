"""The foreach latency benchmark: a --quick smoke run (JSON shape only) and README/JSON agreement."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "foreach_latency.py"
RESULTS = ROOT / "benchmarks" / "results" / "foreach_latency.json"
README = ROOT / "benchmarks" / "README.md"
LEGS = ("source_to_plan", "plan_to_sink", "source_to_sink")


def load_bench():
    spec = importlib.util.spec_from_file_location("foreach_latency_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_shape(results):
    assert results["benchmark"] == "foreach_latency"
    assert results["percentile_method"] == "nearest-rank"
    assert {"cores", "spark_master", "pyspark", "python"} <= set(results["machine"])
    assert results["cases"], "no cases recorded"
    for case in results["cases"]:
        assert {"name", "mode", "trigger", "rate", "sink", "group"} <= set(case)
        if "report" not in case:
            assert case.get("skipped") or case.get("error"), case
            continue
        assert case["rows_recorded"] == case["report"]["count"]
        for leg in LEGS:
            stats = case["report"][leg]
            assert stats["count"] == case["rows_recorded"]
            if stats["count"]:
                assert stats["min"] <= stats["p50"] <= stats["p90"] <= stats["p95"] \
                    <= stats["p99"] <= stats["max"]


@pytest.mark.spark
def test_quick_run_writes_results_json(spark, tmp_path, capsys):
    """``--quick`` through the script's own CLI, in this process, on the shared session."""
    out = tmp_path / "quick.json"
    bench = load_bench()
    assert bench.main(["--quick", "--in-process", "--seconds", "2", "--warmup", "1",
                       "--output", str(out)]) == 0
    results = json.loads(out.read_text())
    check_shape(results)
    assert results["quick"] is True
    assert results["machine"]["spark_master"] == spark.sparkContext.master
    names = [c["name"] for c in results["cases"]]
    assert names == ["rtm-5s-50", "microbatch-50"]
    for case in results["cases"]:
        assert "error" not in case, case
        assert case["rows_sent"] > 0
        assert case["rows_recorded"] == case["rows_sent"], case
    assert "e2e p50" in capsys.readouterr().out  # the printed table
    assert not spark.streams.active  # every query it started was stopped


def test_session_settings_need_a_child_process(spark):
    bench = load_bench()
    group = {"group": "buffer-1k", "conf": {"spark.buffer.size": "1024"}, "cases": []}
    with pytest.raises(ValueError, match="own session"):
        bench.run_group_here(group, 1.0)


def test_committed_results_have_the_expected_shape():
    check_shape(json.loads(RESULTS.read_text()))


@pytest.mark.parametrize("document", ["benchmarks/README.md", "references/real-time-mode.md"])
def test_embedded_tables_match_the_results_json(document):
    bench = load_bench()
    results = json.loads(RESULTS.read_text())
    text = (ROOT / document).read_text()
    start = text.index(bench.README_START) + len(bench.README_START)
    end = text.index(bench.README_END)
    assert text[start:end].strip() == bench.markdown_table(results).strip(), (
        f"{document} is stale: run benchmarks/foreach_latency.py --update-readme "
        "or regenerate the table from the JSON")
