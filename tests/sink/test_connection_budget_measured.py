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
