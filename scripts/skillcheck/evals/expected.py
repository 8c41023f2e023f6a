"""Expected numbers of the numeric tasks, computed by the pack's own calculators (never typed in by hand).

Each function states the scenario of its task's prompt (evals/evals.json);
a change in the calculators changes the expected answer with them.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))


def task_slots() -> dict:
    """48-partition Kafka topic read with maxPartitions=16, one aggregation into 8 shuffle partitions,
    then a repartition(4) before the sink; 8-core workers at 50 % target utilisation."""
    from rtm_lakebase.calc.sizing import QueryShape, kafka_source_tasks, plan_cluster

    shape = QueryShape(kafka_source_tasks(48, 16), (8, 4))
    plan = plan_cluster(shape, cores_per_worker=8, target_utilisation=0.5)
    return {"source_tasks": shape.source_tasks, "required_slots": shape.required_slots, "workers": plan.workers}


def connection_budget() -> dict:
    """2 CU Lakebase compute; the sink stage has 64 tasks; 6 app replicas with pool max 40; 10 reserved.
    Then: the largest sink-task count that still fits on the same compute."""
    from rtm_lakebase.calc.connection_budget import ConnectionBudgetExceeded, check_connection_budget, max_connections

    cap = max_connections(2)
    planned = 64 + 6 * 40 + 10
    try:
        check_connection_budget(2, 64, app_pool_max=40, app_replicas=6, reserved=10)
        fits = True
    except ConnectionBudgetExceeded:
        fits = False
    return {"cap": cap, "planned": planned, "fits": fits, "max_sink_tasks": cap - 6 * 40 - 10}


def slot_fix() -> dict:
    """Used by the fix task: a 4-slot cluster; 8-partition topic; one aggregation."""
    return {"slots": 4, "topic_partitions": 8}


def native_choice() -> dict:
    """Which sink each stated runtime should use for a Kafka -> Lakebase real-time upsert by primary key.

    The native ``format("postgresql")`` sink's runtime gate differs between Databricks page versions
    (DBR 18.3+ classic in older copies, DBR 18 LTS+ in newer ones; see references/lakebase-sink-python.md),
    so only runtimes on which both versions agree are asked.
    """
    return {"oss_spark_4_3": "foreach", "dbr_16_4_lts": "foreach", "dbr_17_3_lts": "foreach",
            "dbr_19_classic_key_upsert": "native"}
