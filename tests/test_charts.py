"""Every committed benchmark chart is exactly what its committed JSON draws (and drawing is reproducible)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import charts
from pack_lab import charts as lab_charts

RESULTS = Path(charts.__file__).resolve().parent / "results"


@pytest.mark.parametrize("json_name", sorted(charts.CHARTS))
def test_committed_chart_is_in_sync_with_its_json(json_name, tmp_path):
    png = charts.CHARTS[json_name][1]
    assert (RESULTS / json_name).is_file() and (RESULTS / png).is_file()
    redrawn = charts.render(json_name, out_dir=tmp_path)
    assert redrawn.read_bytes() == (RESULTS / png).read_bytes(), (
        f"benchmarks/results/{png} is not what {json_name} draws: run python benchmarks/charts.py")


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    first = charts.render("foreach_latency.json", out_dir=tmp_path / "a").read_bytes()
    second = charts.render("foreach_latency.json", out_dir=tmp_path / "b").read_bytes()
    assert first == second and first.startswith(b"\x89PNG")


def test_a_changed_figure_changes_the_chart(tmp_path):
    """The sync test can fail: one edited latency gives different bytes."""
    data = json.loads((RESULTS / "foreach_latency.json").read_text())
    original = charts.render_foreach_latency(data, tmp_path / "original.png").read_bytes()
    data["cases"][0]["report"]["source_to_sink"]["p50"] *= 3
    changed = charts.render_foreach_latency(data, tmp_path / "changed.png").read_bytes()
    assert original != changed


def test_demo_chart_from_a_report(tmp_path):
    report = {"paths": [
        {"path": "rtm-jvm", "latency": {"p50": 12, "p95": 30, "p99": 60}, "engine": {"p50": 9}},
        {"path": "rtm-python", "latency": {"p50": 2000, "p95": 4000, "p99": 4800}, "engine": {"p50": 10}},
        {"path": "microbatch", "skipped": "no javac", "latency": {}, "engine": {}},
    ]}
    out = lab_charts.render_demo_chart(report, tmp_path / "demo.png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_unknown_chart_name_is_refused(capsys):
    assert charts.main(["nope.json"]) == 2
    assert "no chart for 'nope.json'" in capsys.readouterr().err
