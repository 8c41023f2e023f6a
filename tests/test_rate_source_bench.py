"""benchmarks/rate_source.py runs (--quick) and writes its figures; speed itself is never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]


def test_quick_run_writes_both_sources_halves(tmp_path):
    out = tmp_path / "rs.json"
    run = subprocess.run([sys.executable, "benchmarks/rate_source.py", "--quick", "--out", str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [r["source"] for r in result["results"]] == ["rate", "memory"]
    for r in result["results"]:
        assert r["first_half"]["rows"] > 0 and r["second_half"]["rows"] > 0, r["source"]
        assert r["samples"] and isinstance(r["holds_pace"], bool)
    assert "2nd/1st" in run.stdout


def test_bad_arguments_are_one_line_errors():
    run = subprocess.run([sys.executable, "benchmarks/rate_source.py", "--sources", "kafka"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--sources must name" in run.stderr and "Traceback" not in run.stderr


def test_readme_table_is_the_committed_json():
    """The table in benchmarks/README.md carries the figures of benchmarks/results/rate_source.json."""
    result = json.loads((ROOT / "benchmarks" / "results" / "rate_source.json").read_text())
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    names = {"rate": "rate source", "memory": "LowLatencyMemoryStream"}
    for r in result["results"]:
        row = (f"| {names[r['source']]} | {r['offered_rows_per_s']} | {r['first_half']['rows_per_s']} | "
               f"{r['second_half']['rows_per_s']} | {r['second_over_first']:.2f} | "
               f"{r['first_half']['mean_lag_ms']:.{0 if r['first_half']['mean_lag_ms'] >= 100 else 1}f} ms | "
               f"{r['second_half']['mean_lag_ms']:.{0 if r['second_half']['mean_lag_ms'] >= 100 else 1}f} ms | "
               f"{r['behind_at_end_rows']:,} rows |")
        assert row in readme, row
