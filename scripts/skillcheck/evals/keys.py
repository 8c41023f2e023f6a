"""Answer keys of the platform tasks: a structured answer file (JSON) compared with dated facts, never prose.

Each key takes the parsed answer and returns the first mismatch as a sentence, or ``None``. The facts come from
``/work/shared/ground-truth.md`` (Databricks real-time mode, Lakebase, open-source 4.3 runs) as the pack's
references cite them; where Databricks page versions disagree, the key asks nothing about it (or accepts every
reading a page version gives). Sizing comes from the pack's calculators, never typed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

RTM_CONF = "spark.databricks.streaming.realTimeMode.enabled"


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() == "true"


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _runtime(version: Any) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)\.", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def cluster_sizing() -> dict:
    """16-partition Kafka topic, one aggregation into 8 shuffle partitions, 8-core workers at 50 %."""
    from rtm_lakebase.calc import QueryShape, plan_cluster

    shape = QueryShape(16, (8,))
    return {"slots": shape.required_slots, "workers": plan_cluster(shape, cores_per_worker=8,
                                                                    target_utilisation=0.5).workers}


def dbx_cluster(data: dict) -> str | None:
    """A Clusters API body for a real-time query on classic compute: DBR >= 16.4, the cluster-level flag,
    fixed size (no autoscaling), no Photon, on-demand (no spot) workers, sized to the query's task slots."""
    runtime = _runtime(data.get("spark_version"))
    if runtime is None or runtime < (16, 4):
        return f"spark_version {data.get('spark_version')!r}: real-time mode needs Databricks Runtime 16.4 LTS or later"
    if "photon" in str(data.get("spark_version")).lower() or str(data.get("runtime_engine", "")).upper() == "PHOTON":
        return "Photon is on: real-time mode needs it off"
    conf = data.get("spark_conf") or {}
    if not _true(conf.get(RTM_CONF)):
        return f"spark_conf lacks {RTM_CONF}=true (a cluster-level setting)"
    if str(conf.get("spark.sql.shuffle.partitions", "")).strip() != "8":
        return f"spark.sql.shuffle.partitions is {conf.get('spark.sql.shuffle.partitions')!r}, the query plans 8"
    if data.get("autoscale"):
        return "autoscale is set: real-time mode needs a fixed-size cluster"
    avail = _get(data, "aws_attributes", "availability")
    if str(avail or "").upper() != "ON_DEMAND":
        return f"aws_attributes.availability is {avail!r}: spot instances must be off (ON_DEMAND)"
    want = cluster_sizing()
    if data.get("num_workers") != want["workers"]:
        return (f"num_workers {data.get('num_workers')!r}: the query needs {want['slots']} task slots at once; "
                f"8-core workers at 50 % give {want['workers']} workers")
    return None


_INTERVAL = re.compile(r"^\s*(\d+)\s+(milliseconds?|seconds?|minutes?)\s*$", re.I)


def dbx_native_sink(data: dict) -> str | None:
    """Databricks' native Lakebase streaming sink on Runtime 19: format postgresql, its option names only, the
    endpoint as project.branch[.endpoint], batchinterval written with a full unit ("100 ms" is rejected)."""
    if str(data.get("format", "")).lower() != "postgresql":
        return f"format {data.get('format')!r}: the native Lakebase streaming sink is format(\"postgresql\")"
    from rtm_lakebase.check.rules.native_sink import DOCUMENTED  # the checker's set (LBS001): one definition

    opts = {str(k).lower(): v for k, v in (data.get("options") or {}).items()}
    unknown = sorted(set(opts) - DOCUMENTED)
    if unknown:
        return f"options {unknown} are not the sink's (JDBC_STREAMING_SINK_INVALID_OPTIONS)"
    if not str(opts.get("endpoint", "")).startswith("shop.production"):
        return f"endpoint {opts.get('endpoint')!r}: the sink names the Lakebase endpoint as project.branch[.endpoint]"
    if str(opts.get("dbtable", "")) not in ("orders", "public.orders"):
        return f"dbtable {opts.get('dbtable')!r}, expected public.orders"
    if "upsertkey" in opts and str(opts["upsertkey"]) != "order_id":
        return f"upsertkey {opts['upsertkey']!r} must match the primary key order_id"
    if "database" in opts and str(opts["database"]) != "databricks_postgres":
        return f"database {opts['database']!r}: the table lives in databricks_postgres"
    m = _INTERVAL.match(str(opts.get("batchinterval", "")))
    if not m:
        return (f"batchinterval {opts.get('batchinterval')!r}: write the interval with a full unit, e.g. "
                "\"100 milliseconds\" (\"100 ms\" fails with INVALID_INTERVAL_FORMAT.INVALID_UNIT)")
    unit = m.group(2).lower()
    ms = int(m.group(1)) * (1 if unit.startswith("milli") else 60_000 if unit.startswith("minute") else 1000)
    if ms > 100:
        return f"batchinterval {opts['batchinterval']!r} flushes less often than every 100 ms"
    if str(data.get("output_mode", "")).lower() != "update":
        return f"output_mode {data.get('output_mode')!r}: real-time mode runs in update mode"
    return None


def lakebase_connection(data: dict) -> str | None:
    """A weeks-long executor-side sink on Lakebase (autoscaling up to 4 CU) that cannot refresh credentials."""
    from rtm_lakebase.calc import max_connections

    want = {"port": 5432, "database": "databricks_postgres", "sslmode": "require", "auth": "native",
            "oauth_token_lifetime_minutes": 60, "max_connections": max_connections(4),
            "pgbouncer_with_oauth": False, "idle_timeout_hours": 24}
    for key, value in want.items():
        got = data.get(key)
        ok = (got is value) if isinstance(value, bool) else (
            str(got).strip().lower() == value if isinstance(value, str) else
            isinstance(got, (int, float)) and not isinstance(got, bool) and got == value)
        if not ok:
            return f"{key}: expected {value!r}, answer says {got!r}"
    return None


def sdp_realtime(data: dict) -> str | None:
    """Real-time mode inside Lakeflow Spark Declarative Pipelines (Public Preview): continuous pipeline, the
    cluster flag in the pipeline configuration, per-flow trigger RealTime, one shuffle per flow, no raw
    ForeachWriter."""
    if data.get("continuous") is not True:
        return f"continuous is {data.get('continuous')!r}: a real-time pipeline runs continuously"
    if not _true(_get(data, "configuration", RTM_CONF)):
        return f"configuration lacks {RTM_CONF}=true"
    conf = data.get("flow_conf") or {}
    if str(conf.get("pipelines.trigger", "")).strip().lower() != "realtime":
        return f"flow_conf pipelines.trigger is {conf.get('pipelines.trigger')!r}: each real-time flow sets RealTime"
    if data.get("max_shuffles_per_flow") != 1:
        return f"max_shuffles_per_flow {data.get('max_shuffles_per_flow')!r}: a real-time flow allows one shuffle"
    if data.get("raw_foreach_writer") is not False:
        return "raw_foreach_writer: a declarative pipeline's real-time flow takes no raw ForeachWriter"
    return None


#: Open-source 4.3.0 as run in the pack's lab (where Spark's guide differs, the run wins), and Databricks where
#: every page version agrees.
OSS_4_3 = {"python_udf": False, "memory_sink": False, "rate_source": False, "foreach_batch": False,
           "transform_with_state_in_pandas": False, "drop_duplicates": True, "aggregation": True,
           "drop_duplicates_within_watermark": False, "session_window": False, "broadcast_stream_static_join": True,
           "kafka_source": True}
DATABRICKS = {"python_udf": True, "foreach_batch": False, "transform_with_state_in_pandas": False,
              "drop_duplicates": True, "aggregation": True, "session_window": False,
              "broadcast_stream_static_join": True, "kafka_source": True}


def support_matrix(data: dict) -> str | None:
    for side, key in (("oss_4_3", OSS_4_3), ("databricks", DATABRICKS)):
        got = data.get(side)
        if not isinstance(got, dict):
            return f"{side} is not an object of feature -> bool"
        for feature, value in key.items():
            if got.get(feature) is not value:
                return f"{side}.{feature}: expected {value}, answer says {got.get(feature)!r}"
    return None


KEYS: dict[str, Callable[[dict], str | None]] = {"dbx_cluster": dbx_cluster, "dbx_native_sink": dbx_native_sink,
                                                 "lakebase_connection": lakebase_connection,
                                                 "sdp_realtime": sdp_realtime, "support_matrix": support_matrix}
