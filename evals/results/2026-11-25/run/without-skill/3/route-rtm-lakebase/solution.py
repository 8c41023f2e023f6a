"""Kafka `orders` -> Lakebase table `orders` on Databricks Runtime 17.3 LTS, lowest latency available.

Choices:
  * Real-time mode (trigger(realTime=...)) is the lowest-latency execution mode; it exists from DBR 16.4 LTS.
  * Databricks' native Lakebase streaming sink (writeStream.format("postgresql")) needs DBR 18 or above,
    so on 17.3 LTS the sink is a foreach writer - the idempotent writer we are given.
  * foreachBatch is not allowed in real-time mode; foreach(writer) is.
  * Real-time mode accepts only output mode "update".
  * The realTime value is the batch/checkpoint duration (not a latency target); 5 minutes is the usual value.
    Because the query restarts from the last checkpoint after a failure, rows of the current batch can be
    delivered again: that is why the writer has to be idempotent (upsert keyed by id).

Cluster (not settable from the query): classic compute with dedicated (or standard, Python only) access
mode, Photon and autoscaling off, spot off, and spark.databricks.streaming.realTimeMode.enabled=true in the
cluster's Spark config. Give it at least as many task slots as source tasks (Kafka partitions, or the
`maxPartitions` source option) - this query is stateless, so that is the whole requirement.
"""

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

REALTIME_BATCH_DURATION = "5 minutes"


def start(orders: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    """Stream the parsed orders (id, status, updated_at) into Lakebase through `writer` in real-time mode."""
    return (orders.select("id", "status", "updated_at")
            .writeStream
            .queryName("orders-to-lakebase")
            .foreach(writer)                            # idempotent upsert into Lakebase `orders`
            .outputMode("update")                       # only mode real-time mode accepts
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
