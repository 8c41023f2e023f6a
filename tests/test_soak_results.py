"""The committed 30-minute soak (benchmarks/results/soak.json) is what the references say it is."""

from __future__ import annotations

import json
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


def test_the_reference_renders_its_figures_from_the_committed_soak():
    """The numbers are fig markers (rendered by `skills.py generate`, compared by the validator's FIG001);
    what the prose says about them in words is checked here against the file."""
    assert TEXT.count("<!-- fig: soak.json#") >= 15
    assert "five faults" in TEXT and "0 lost and 0 duplicated on both paths" in TEXT
    # "JVM sink p50 12 ms in every 5-minute window": the marker renders window 0; every window has that median.
    jvm = RESULT["paths"]["rtm_jvm"]
    assert len({w["p50"] for w in jvm["latency_windows"]}) == 1
    assert "in every 5-minute window" in TEXT
    # "1 or 2 on both paths": no sample above 2.
    assert max(s["connections"][p] for s in RESULT["samples"] if s["connections"] for p in RESULT["paths"]) == 2
