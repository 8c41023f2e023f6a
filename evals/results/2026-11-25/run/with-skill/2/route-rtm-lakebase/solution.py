"""Kafka `orders` -> Lakebase table `orders` on Databricks Runtime 17.3 LTS, in real-time mode.

Route chosen
- Real-time mode (``trigger(realTime=...)``) is the lowest-latency trigger the
  runtime offers; it runs on Databricks Runtime 16.4 LTS and later, so 17.3 LTS
  qualifies. Kafka is a supported real-time source.
- The native Lakebase sink (``writeStream.format("postgresql")``) would be the
  first choice, but it needs Databricks Runtime 18 LTS or above (older page
  versions: 18.3+, Public Preview). On 17.3 LTS the sink is therefore a
  ``foreach`` writer: the idempotent one we are given. ``foreachBatch`` is
  rejected in real-time mode, so ``foreach`` is the only custom sink.

Cluster requirements (Databricks real-time mode set-up)
- classic compute, dedicated access mode (standard is accepted for Python);
  not serverless;
- autoscaling OFF, Photon OFF, spot instances OFF;
- ``spark.databricks.streaming.realTimeMode.enabled true`` in the CLUSTER's
  Spark config (not ``spark.conf.set`` in the notebook), else
  ``STREAMING_REAL_TIME_MODE.CLUSTER_CONFIGURATION_NOT_SUPPORTED``;
- task slots >= partitions of the `orders` topic (this query has no shuffle;
  the Databricks Kafka option ``maxPartitions`` can group partitions per task);
  aim for about 50 % utilisation. One cluster (job compute) per latency-critical query.
- Lakebase connections: one per sink task, held for the whole long batch;
  keep (topic partitions + re-runs + other apps) under the compute's cap.

Semantics
- ``realTime="5 minutes"`` is the checkpoint interval (offsets committed, and
  the writer's open()/close() run, once per long batch), not a latency:
  rows are processed as they arrive.
- Update output mode is the only one real-time mode accepts.
- Delivery to ``foreach`` is at-least-once: after a failure the unfinished
  long batch is replayed. The writer must upsert on ``id`` with a version
  guard on ``updated_at`` (an older replayed status never overwrites a newer
  one) and must flush from process()/a timer, not only in close(), because
  close() only runs at the end of the long batch.
- When the workspace moves to Databricks Runtime 18 LTS+, switch to the
  native sink (see ``start_native_sink`` below): no writer code, workspace
  identity, ``upsertkey="id"``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

COLUMNS = ("id", "status", "updated_at")
CHECKPOINT_INTERVAL = "5 minutes"


def start(orders: DataFrame, writer: Any, checkpoint: str) -> StreamingQuery:
    """Start the real-time query writing ``orders`` through ``writer``; return it.

    ``orders``: the parsed Kafka stream (id, status, updated_at).
    ``writer``: the given idempotent ``foreach`` writer (object with
    open/process/close), which upserts on id.
    ``checkpoint``: durable location owned by this query only (e.g. a UC volume).
    """
    return (
        orders.select(*COLUMNS)
        .writeStream.queryName("orders_to_lakebase")
        .foreach(writer)
        .outputMode("update")                      # the only mode real-time mode accepts
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=CHECKPOINT_INTERVAL)     # checkpoint interval, not latency
        .start()
    )


def start_native_sink(orders: DataFrame, endpoint: str, checkpoint: str,
                      dbtable: str = "public.orders",
                      database: str = "databricks_postgres") -> StreamingQuery:
    """For Databricks Runtime 18 LTS and above ONLY (not 17.3): the native Lakebase sink.

    The table needs a primary key on ``id`` (``upsertkey`` must match it).
    """
    return (
        orders.select(*COLUMNS)
        .writeStream.format("postgresql")
        .outputMode("update")
        .option("endpoint", endpoint)
        .option("database", database)
        .option("dbtable", dbtable)
        .option("upsertkey", "id")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=CHECKPOINT_INTERVAL)
        .start()
    )
