"""Kafka `orders` -> Lakebase table `orders`, lowest latency on Databricks Runtime 17.3 LTS.

Why this shape
--------------
* Lowest latency on DBR 17.3 LTS = Structured Streaming *real-time mode* (DBR 16.4 LTS and above),
  i.e. `.trigger(realTime=...)`.  Cluster prerequisites (set on the cluster, not in this code):
  classic compute in dedicated (or standard, Python) access mode, autoscaling off, Photon off,
  spot instances off, and Spark conf `spark.databricks.streaming.realTimeMode.enabled true`.
* Databricks' native Lakebase streaming sink (`format("postgresql")`) needs DBR 18 and above, so on
  17.3 LTS the sink is a `foreach` writer.  `foreachBatch` is NOT allowed in real-time mode, so the
  given idempotent foreach writer is used through `.foreach(writer)`.
* Real-time mode only accepts output mode "update".
* The trigger duration is a checkpoint interval, not a latency target; records are written as they
  arrive.  Default 5 minutes.
* Because a failed batch is replayed from the last committed offsets, rows can reach the writer more
  than once; the writer must be idempotent (it is: it upserts by primary key, newest updated_at wins).
"""

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

CHECKPOINT_INTERVAL = "5 minutes"


def start(orders: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    """Stream the parsed orders (id, status, updated_at) into Lakebase through `writer`."""
    return (orders.select("id", "status", "updated_at")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .queryName("orders-to-lakebase")
            .trigger(realTime=CHECKPOINT_INTERVAL)
            .start())
