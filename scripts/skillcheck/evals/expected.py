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


def _calc():
    """The pack's calculators (``rtm_lakebase.calc``)."""
    from rtm_lakebase import calc

    return calc


def kafka_max_partitions() -> dict:
    """96-partition topic, one aggregation into 12 shuffle partitions, 16-core workers at 50 %: for each
    maxPartitions in (none, 48, 24, 12) the slots and workers; the choice with the fewest workers whose busiest
    source task reads at most 4 topic partitions."""
    c = _calc()
    options = c.kafka_tradeoff(96, (12,), (None, 48, 24, 12))
    out = {}
    best = None
    for o in options:
        workers = c.plan_cluster(c.QueryShape(o.source_tasks, (12,)), 16, 0.5).workers
        label = "none" if o.max_partitions is None else str(o.max_partitions)
        out[f"slots_{label}"] = o.required_slots
        out[f"workers_{label}"] = workers
        if o.topic_partitions_per_task <= 4 and (best is None or workers < best[1]):
            best = (label, workers)
    out["choice"] = best[0]
    return out


def lakebase_cu() -> dict:
    """A real-time sink of 120 tasks, 4 app replicas with pool max 50, 10 reserved: the smallest CU size among
    0.5, 1, 2, 4, 8 whose connection cap fits, and that cap."""
    c = _calc()
    need = 120 + 4 * 50 + 10
    for cu in (0.5, 1, 2, 4, 8):
        if c.max_connections(cu) >= need:
            return {"planned": need, "capacity_units": cu, "cap": c.max_connections(cu)}
    raise AssertionError("no size fits")


def stateful_workers() -> list[dict]:
    """Deduplication then aggregation (two shuffles of 6 partitions each) over a 24-partition topic read with
    maxPartitions 12; 8-core workers, hard minimum (100 %) and at 50 %.

    Two readings the prompt allows: ``maxPartitions`` caps the source tasks at 12 (Databricks' option, as the
    prompt states it), or, open-source 4.3 mapping Kafka partitions to source tasks 1:1 (the Spark 4.3 guide,
    which the skill follows), the option does not apply and there are 24 source tasks. In the recorded run
    every with-skill answer took the second reading, so both pass.
    """
    c = _calc()
    out = []
    for source_tasks in (c.kafka_source_tasks(24, 12), 24):
        shape = c.stateful_query(source_tasks, 6, exchanges=2)
        out.append({"required_slots": shape.required_slots,
                    "workers_minimum": c.plan_cluster(shape, 8, 1.0).workers,
                    "workers_half": c.plan_cluster(shape, 8, 0.5).workers})
    return out


def _checker_codes(rel: str) -> list[str]:
    from rtm_lakebase.check.files import check_file

    path = _ROOT / rel
    return sorted({f.code for f in check_file(path.parent, path.name, rel)})


def checker_query_codes() -> dict:
    return {"codes": _checker_codes("evals/files/checker_query.py")}


def checker_enrich_codes() -> dict:
    return {"codes": _checker_codes("evals/files/checker_enrich.py")}


def slots_error() -> dict:
    """evals/files/slots_error.py on the 4-slot cluster: an 8-partition topic, all source tasks, 6 shuffle
    partitions."""
    c = _calc()
    return {"error_class": "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT",
            "required_slots": c.QueryShape(c.kafka_source_tasks(8, None), (6,)).required_slots, "available_slots": 4}


def runtime_dbr_16_4() -> dict:
    """DBR 16.4 LTS, classic compute (ground truth, 'Databricks real-time mode' and 'Lakebase' sections:
    docs.databricks.com .../structured-streaming/real-time/setup and .../real-time-reference; the native
    postgresql sink needs DBR 18.3+ (older page) or DBR 18 LTS+ (newer page) - 16.4 is below both)."""
    return {"foreach_batch": False, "drop_duplicates_within_watermark": False,
            "enable_conf": "spark.databricks.streaming.realTimeMode.enabled", "serverless": False,
            "lakebase_sink": "foreach"}


def error_fixes() -> dict:
    """Ground truth: Databricks error classes beyond OSS; the native sink's batchinterval spelling."""
    return {"DROP_DUPLICATES_WITHIN_WATERMARK_NOT_SUPPORTED": "use-dropDuplicates",
            "SHUFFLE_MORE_THAN_ONCE": "split-queries",
            "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT": "fit-task-slots",
            "SESSION_WINDOWS_NOT_SUPPORTED": "tumbling-or-sliding-window",
            "INVALID_INTERVAL_FORMAT.INVALID_UNIT": "interval-spelling"}


def max_partitions_for_slots() -> dict:
    """32-partition topic, one aggregation into 4 shuffle partitions, 16 slots: the most source tasks that fit."""
    c = _calc()
    fitting = [o for o in c.kafka_tradeoff(32, (4,), list(range(1, 33))) if o.required_slots <= 16]
    best = max(fitting, key=lambda o: o.source_tasks)
    return {"source_tasks": best.source_tasks, "max_partitions": best.max_partitions,
            "partitions_per_task": best.topic_partitions_per_task}
