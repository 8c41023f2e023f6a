"""Kafka `orders` -> Lakebase table `orders` on Databricks Runtime 17.3 LTS, in real-time mode.

Lowest latency on this runtime = real-time mode (``trigger(realTime=...)``), supported from
DBR 16.4 LTS. The native Lakebase sink (``format("postgresql")``) needs DBR 18 LTS+, so on
17.3 LTS rows go through the given idempotent ``foreach`` writer (``foreachBatch`` is rejected
in real-time mode). Delivery is at-least-once, so the writer must upsert on ``id`` with a
guard on ``updated_at`` (an older replayed status must not overwrite a newer one).

Cluster requirements: classic compute (dedicated, or standard for Python), Photon off,
autoscaling off, spot off, Spark conf ``spark.databricks.streaming.realTimeMode.enabled true``;
task slots >= Kafka source tasks (topic partitions, or ``maxPartitions``) -- this query is
stateless, so no shuffle slots.
"""

TRIGGER = "5 minutes"  # how often the query checkpoints, not a latency target


def start(orders, writer, checkpoint):
    return (orders.select("id", "status", "updated_at")
            .writeStream
            .queryName("orders_to_lakebase")
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=TRIGGER)
            .start())
