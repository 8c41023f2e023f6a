"""The connection calculator's sink term, as measured on the standalone cluster (benchmarks/results/soak*.json)."""

from __future__ import annotations

import pytest

from rtm_lakebase.calc.connection_budget import JVM_POOL_MAX_IDLE, check_connection_budget, sink_connections


def test_sink_connections_counts_reruns_and_the_jvm_pool():
    assert sink_connections(8) == 8
    assert sink_connections(8, rerun_tasks=4) == 12  # a lost executor's 4 tasks re-run elsewhere
    assert sink_connections(8, jvm_executors=2, jvm_pool_idle=4) == 16
    assert sink_connections(8, jvm_executors=2, jvm_pool_idle=99) == 8 + 2 * JVM_POOL_MAX_IDLE  # bounded
    assert sink_connections(8, python_idle_workers=8) == 16  # each idle Python worker keeps one
    budget = check_connection_budget(2, sink_tasks=sink_connections(200, rerun_tasks=100), app_pool_max=10,
                                     app_replicas=5)
    assert budget.planned == 300 + 50 + 10 <= budget.cap == 419
    with pytest.raises(ValueError, match="rerun_tasks must not be negative"):
        sink_connections(1, rerun_tasks=-1)
    with pytest.raises(ValueError, match="python_idle_workers must not be negative"):
        sink_connections(1, python_idle_workers=-1)


def _plan(path: str, workers: int) -> int:
    """What sink_connections plans for one sink task of ``path`` on the soak's cluster (one re-run attempt)."""
    if path == "rtm_jvm":
        return sink_connections(1, rerun_tasks=1, jvm_executors=workers, jvm_pool_idle=1)
    return sink_connections(1, rerun_tasks=1, python_idle_workers=workers)  # one Python worker per executor


def test_the_measured_connections_stay_within_the_plan():
    """The soak with both pools (benchmarks/results/soak-3min-pools.json): every sample of each path's
    connections is within what the calculator plans, and between faults each path kept a connection."""
    import json
    from pathlib import Path

    result = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "soak-3min-pools.json")
                        .read_text())
    workers = result["settings"]["workers"]
    faults = [f["t_s"] for f in result["faults"]]
    for path in result["settings"]["paths"]:
        samples = [(s["t_s"], s["connections"][path]) for s in result["samples"] if s["connections"]]
        assert samples and max(n for _, n in samples) <= _plan(path, workers), (path, samples)
        # Kept across long batches: once connected, a path never showed 0 except within 30 s of a fault.
        first = next(t for t, n in samples if n)
        gaps = [t for t, n in samples if t > first and n == 0 and not any(0 <= t - f <= 30 for f in faults)]
        assert not gaps, (path, gaps)
