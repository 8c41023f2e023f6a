"""The soak's 3-minute version: every fault once, nothing lost or duplicated, the figures recorded."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_three_minute_soak_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run(
        [sys.executable, "benchmarks/soak.py", "--minutes", "3", "--fault-every", "45", "--window", "60",
         "--sample-every", "5", "--trigger-seconds", "5", "--worker-down", "20", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert [f["fault"] for f in result["faults"]] == ["worker_kill", "postgres_restart", "network_drop"]
    assert result["drained"] and result["lost_total"] == 0 and result["duplicated_total"] == 0
    for path, report in result["paths"].items():
        assert report["rows"] == report["expected"] == result["rows_per_path"] > 50_000, path
        assert report["latency_windows"], path
    assert result["samples"] and "load_avg_before" in result["machine"]
    assert {"worker0.executor_rss_mb", "worker1.executor_rss_mb", "connections.rtm_jvm",
            "connections.rtm_python"} <= set(result["trends"])
    work = re.search(r"work dir (\S+)", run.stderr)
    assert work and not Path(work.group(1)).exists(), "an exact run leaves its work folder behind"


def test_bad_arguments_are_one_line_errors():
    run = subprocess.run([sys.executable, "benchmarks/soak.py", "--paths", "nope"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--paths must name" in run.stderr and "Traceback" not in run.stderr
