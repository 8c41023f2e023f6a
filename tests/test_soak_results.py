"""The committed 30-minute soak (benchmarks/results/soak.json) is what the references say it is."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = json.loads((ROOT / "benchmarks" / "results" / "soak.json").read_text())
TEXT = (ROOT / "references" / "real-time-mode.md").read_text()


def test_the_committed_soak_is_a_full_exact_run():
    assert RESULT["settings"]["minutes"] == 30 and RESULT["settings"]["source"] == "rate"
    assert RESULT["drained"] and RESULT["lost_total"] == 0 and RESULT["duplicated_total"] == 0
    assert set(RESULT["restarts"].values()) == {0}
    assert [f["fault"] for f in RESULT["faults"]] == (["worker_kill", "postgres_restart", "network_drop"] * 2)[:5]
    for path, report in RESULT["paths"].items():
        assert report["rows"] == report["expected"] == RESULT["rows_per_path"], path
        assert report["missing"] == report["duplicated"] == report["unexpected_ids"] == 0, path


def test_the_reference_quotes_the_committed_figures():
    assert f"{RESULT['rows_per_path']:,} rows per path" in TEXT
    assert "five faults" in TEXT and "0 lost and 0 duplicated on both paths" in TEXT
    jvm = RESULT["paths"]["rtm_jvm"]
    assert {w["p50"] for w in jvm["latency_windows"]} == {12.0}
    assert "JVM sink p50 12 ms in every 5-minute window" in TEXT
    p99s = ", ".join(f"{w['p99'] / 1000:.2g} s" for w in jvm["latency_windows"])
    quoted = re.search(r"its p99 per window (.*?); overall", TEXT).group(1)
    assert re.sub(r" \([^)]*\)", "", quoted).replace("then ", "") == p99s
    trends = RESULT["trends"]
    assert f"slopes {trends['connections.rtm_jvm']['slope_per_min']} and " \
           f"{trends['connections.rtm_python']['slope_per_min']} per minute" in TEXT
    assert max(s["connections"][p] for s in RESULT["samples"] if s["connections"] for p in RESULT["paths"]) == 2
