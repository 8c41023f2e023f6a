"""benchmarks/jvm_append_copy.py: both append paths land every row; bad arguments are one line; the reference's
figure is the committed JSON's. No speed is asserted (the figure comes from the script)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.jvm_append_copy import DEFAULT_OUTPUT, reference_sentence, run_once, write_input

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spark
@pytest.mark.postgres
def test_copy_and_insert_runs_land_every_row(jvm_spark, pg_dsn, tmp_path):
    schema = write_input(jvm_spark, 3000, str(tmp_path / "input"))
    for path in ("copy", "insert", "noop"):
        result = run_once(jvm_spark, path, str(tmp_path / "input"), schema, pg_dsn, f"bench_{path}_{tmp_path.name}"[:60],
                          str(tmp_path / f"ck-{path}"), 500, 3000)
        assert result["rows_written"] == 3000 and result["rows_per_s"] > 0, result


def test_bad_arguments_are_one_line_errors():
    run = subprocess.run([sys.executable, "benchmarks/jvm_append_copy.py", "--rows", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "must be positive" in run.stderr and "Traceback" not in run.stderr


def test_the_reference_states_the_committed_figure():
    report = json.loads(DEFAULT_OUTPUT.read_text())
    assert report["summary"]["copy_over_insert_median"] > 0
    text = (ROOT / "references" / "lakebase-sink-python.md").read_text()
    assert reference_sentence(report) in text
