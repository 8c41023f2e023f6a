"""benchmarks/flush_failure_delay.py runs and records what it measures (the figures are in the reference)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_run_of_the_jvm_sink_records_a_prompt_failure_naming_its_cause(tmp_path, sink_jars):
    out = tmp_path / "ffd.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flush_failure_delay.py"), "--quick",
                           "--sinks", "jvm", "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    assert result["sink"] == "jvm" and result["exception_names_cause"] is True
    assert result["seconds_to_exception"] < 30  # well inside the 30 s long batch


def test_committed_figures_are_the_ones_the_reference_quotes():
    data = json.loads((ROOT / "benchmarks" / "results" / "flush_failure_delay.json").read_text())
    reference = (ROOT / "references" / "lakebase-sink-python.md").read_text()
    assert data["trigger"] == "5 minutes"
    labels = {"jvm": "JVM sink", "python-fast": "Python writer, [fast foreach path](#fast-python-foreach-for-real-time-mode)",
              "python": "Python writer, stock `foreach`"}
    assert sorted(r["sink"] for r in data["results"]) == sorted(labels)
    for result in data["results"]:
        label = labels[result["sink"]]
        # The cell is rendered from the JSON (a fig marker); tests/validator/test_figures.py checks its value.
        marker = f"<!-- fig: flush_failure_delay.json#/results[sink={result['sink']}]/seconds_to_exception :.1f -->"
        assert f"| {label} | {marker}{result['seconds_to_exception']:.1f} s |" in reference, label
