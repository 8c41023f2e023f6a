"""Kafka `orders` -> Lakebase table `orders` on Databricks Runtime 17.3 LTS, real-time mode.

Why this shape:

- Lowest latency on this runtime is real-time mode (`trigger(realTime=...)`,
  Databricks Runtime 16.4 LTS or later).
- Databricks' native Lakebase streaming sink (`writeStream.format("postgresql")`)
  needs Databricks Runtime 18 LTS or above (older page versions: 18.3, Public
  Preview), so on 17.3 LTS the sink is a `foreach` writer: the idempotent one
  we are given. `foreachBatch` is rejected in real-time mode.
- Delivery to a `foreach` sink is at-least-once: after a failure the unfinished
  long batch is replayed. The writer must upsert on `id` with a version guard
  (`updated_at`: an older replayed row never overwrites a newer one) and flush
  from `process()`/a timer, because `open()`/`close()` run only once per long
  batch in real-time mode.

Cluster requirements (set on the cluster, not in this code): classic compute in
dedicated access mode (or standard for Python), Photon off, autoscaling off,
spot off, and `spark.databricks.streaming.realTimeMode.enabled true` in the
cluster's Spark config. Task slots: one per Kafka partition of `orders` (or per
`maxPartitions` group) - this query has no shuffle. Each sink task holds one
Lakebase connection for the whole long batch: count them against the
compute's connection cap.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

COLUMNS = ("id", "status", "updated_at")


def start(orders: DataFrame, writer: Any, checkpoint: str) -> StreamingQuery:
    """Stream ``orders`` (id, status, updated_at) into Lakebase through ``writer`` in real-time mode."""
    return (orders.select(*COLUMNS)
            .writeStream
            .foreach(writer)
            .outputMode("update")                      # the only output mode real-time mode accepts
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")             # checkpoint interval, not a latency target
            .start())
