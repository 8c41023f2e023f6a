"""The Kafka workload benchmark: a quick run end to end, the profile it reads, and the bottleneck it names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import kafka_workload
from pack_lab.cpu_profile import CpuSnapshot, fold

ROOT = Path(__file__).resolve().parent.parent


def test_snapshot_counts_a_busy_child_and_folds_thread_numbers():
    spinner = subprocess.Popen(["sh", "-c", "while :; do :; done"])
    try:
        start = CpuSnapshot.take({"spinner": [spinner.pid], "gone": [2**22 + 7]})
        deadline = time.monotonic() + 120  # only catches a hang
        while time.monotonic() < deadline:
            profile = CpuSnapshot.take({"spinner": [spinner.pid], "gone": [2**22 + 7]}).since(start)
            if profile["cpu_s_by_group"].get("spinner", 0) > 0:
                break
            time.sleep(0.2)
    finally:
        spinner.kill()
        spinner.wait()
    assert profile["cpu_s_by_group"]["spinner"] > 0
    assert profile["cpu_s_by_group"].get("gone", 0) == 0
    assert profile["thread_names"][0] == {**profile["thread_names"][0], "group": "spinner", "process": "sh"}
    assert profile["hottest_threads"][0]["process"] == "sh"
    assert 0 <= profile["machine_busy_share"] <= 1
    assert fold("GC Thread#12") == "GC Thread#N"


def _run(cores: dict, busy: float, hottest: list[tuple[str, float]]) -> dict:
    return {"profile": {"cores": 2, "machine_busy_share": busy, "cores_used_by_group": cores,
                        "hottest_threads": [{"thread": t, "process": "java", "group": "spark", "cores": c}
                                            for t, c in hottest]}}


@pytest.mark.parametrize(("cores", "busy", "hottest", "starts"), [
    ({"spark": 1.2, "kafka broker": 0.5}, 0.97, [("Executor task l", 0.6)],
     "CPU: the machine's 2 cores were 97% busy, 1.70 cores of it this workload's"),
    ({"spark": 0.3, "kafka broker": 0.1}, 0.97, [("Executor task l", 0.2)],
     "other jobs: the machine's 2 cores were 97% busy but this workload used only 0.40 cores"),
    ({"spark": 1.2, "kafka broker": 0.3}, 0.55, [("Executor task l", 0.95)],
     "one thread: Executor task l in java (spark) used 0.95"),
    ({"spark": 1.2, "kafka broker": 0.3}, 0.40, [("Executor task l", 0.30)], "neither the cores (40% busy"),
])
def test_bottleneck_is_read_from_the_profile(cores, busy, hottest, starts):
    sentence = kafka_workload.bottleneck(_run(cores, busy, hottest))
    assert sentence.startswith(starts), sentence
    assert f"spark {cores['spark']:.2f}" in sentence


def test_latency_growth_recovers_the_rate_a_path_moves():
    # 1,000 rows/s offered for 10 s to a path that moves 800 rows/s: row i waits i/800 - i/1000 s longer
    sent = [i for i in range(0, 10_000, 10)]  # produce times in ms (one row per ms)
    latency = [20 + (i / 800 - i / 1000) * 1000 for i in sent]
    growth = kafka_workload.latency_growth(sent, latency)
    assert growth == pytest.approx(1000 / 800 - 1)
    assert 1000 / (1 + growth) == pytest.approx(800)
    assert kafka_workload.latency_growth(sent, [20] * len(sent)) == 0
    assert kafka_workload.latency_growth([5], [7]) == 0


@pytest.mark.kafka
@pytest.mark.slow
def test_quick_run_lands_every_row_on_every_path(tmp_path):
    out = tmp_path / "kafka.json"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("KAFKA_BOOTSTRAP", None)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kafka_workload.py"), "--quick",
                           "--output", str(out)], capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["quick"] is True and results["target_rate"] == 1000
    assert [entry["path"] for entry in results["paths"]] == list(kafka_workload.PATHS)
    assert {"load_average_1m_at_start", "load_average_1m_at_end"} <= set(results["machine"])
    for entry in results["paths"]:
        assert entry["capacity"]["rows_landed"] == entry["capacity"]["rows"] == 5000, entry["capacity"]
        assert entry["capacity"]["rows_per_s"] > 0
        first = entry["runs"][0]
        assert "error" not in first, first
        assert first["rate"] == 1000
        assert first["rows_landed"] == first["rows_acked"] == first["rows_sent"] == 5000, first
        vis = first["visible"]
        assert vis["count"] == 5000 and vis["min"] <= vis["p50"] <= vis["p95"] <= vis["p99"] <= vis["max"]
        assert first["cpu_s_per_1000_rows"] > 0
        groups = first["profile"]["cpu_s_by_group"]
        assert {"spark (JVM + Python workers)", "kafka broker", "postgres", "producer"} <= set(groups)
        assert groups["spark (JVM + Python workers)"] > 0 and groups["kafka broker"] > 0
        assert first["bottleneck"]
    assert out.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert "highest sustained paced rate" in proc.stdout
