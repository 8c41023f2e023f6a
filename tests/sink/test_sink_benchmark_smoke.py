"""The sink benchmark script runs end to end at tiny sizes and every writer it times lands all its rows.

Correctness of the script only: no speed is asserted (figures come from the
script itself, see benchmarks/results/sink_benchmark.json). The Spark part is
left out here because it starts its own 2-core session.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.postgres


def test_benchmark_quick_run_writes_every_row(pg_dsn, tmp_path):
    from benchmarks.sink_benchmark import main

    output = tmp_path / "result.json"
    report = main(["--quick", "--no-spark", "--rows", "3000", "--batch", "500",
                   "--dsn", pg_dsn, "--output", str(output)])
    saved = json.loads(output.read_text())
    assert saved["direct"] == report["direct"]
    names = [r["name"] for r in report["direct"]]
    assert names[:2] == ["raw COPY (ceiling)", "raw COPY into the keyed table"] and len(names) == 10
    for result in report["direct"]:
        assert result["rows_in_table"] == result["rows"], result  # every writer landed every row
        assert result["rows_per_s"] > 0
    assert report["direct"][0]["ratio_to_copy"] == 1.0
    assert report["direct"][1]["ratio_to_keyed_copy"] == 1.0
    keyed = {r["name"]: r["ratio_to_keyed_copy"] is not None for r in report["direct"]}
    assert keyed["sink upsert, new keys (unnest)"] and not keyed["sink append (COPY)"]
    assert set(report["targets"]) >= {"upsert_vs_copy (target >= 0.45)", "upsert_vs_keyed_copy (target >= 0.45)",
                                    "append_vs_copy (target >= 0.85)"}


def test_reference_figures_match_the_json_file():
    from benchmarks.sink_benchmark import DEFAULT_OUTPUT, END, REFERENCE, START, render_markdown

    report = json.loads(DEFAULT_OUTPUT.read_text())
    text = REFERENCE.read_text()
    region = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert region == render_markdown(report), (
        "references/lakebase-sink-python.md is out of date: run "
        "`.venv/bin/python benchmarks/sink_benchmark.py --update-reference`")
