"""Fixed real-time query: severe events (severity >= 3) through an idempotent foreach writer.

What was rejected, and the fix
1. ``foreachBatch`` is not allowed in real-time mode: ``start()`` fails with
   STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST (the sink hands
   over whole batches, real-time mode processes rows as they arrive).
   -> ``.foreach(writer)`` with the idempotent writer we are given. (Writing a
   table per batch with ``saveAsTable`` stays a micro-batch job: if that is
   what is really needed, run the original ``foreachBatch`` with a
   ``processingTime`` trigger instead.)
2. No output mode means append, which real-time mode rejects
   (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED).
   -> ``.outputMode("update")``.
3. ``realTime="1 second"`` is below the minimum real-time batch duration of
   open-source Spark, 5 seconds (INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL).
   -> at least ``"5 seconds"``. The duration is the checkpoint interval (how
   often offsets are committed and the writer's open()/close() run), NOT the
   latency: rows are processed as they arrive either way. 5 seconds keeps the
   replay after a failure and the Python foreach sink's worst-case delay short;
   production queries whose sink allows it use minutes (pass ``trigger=``).

Delivery to ``foreach`` is at-least-once (an unfinished long batch is replayed
after a failure), which is why the writer must be idempotent (upsert on a key).
Source must be real-time capable (Kafka; not rate/file sources in open-source
Spark). On Databricks the cluster also needs Runtime 16.4 LTS+, classic
compute, Photon/autoscaling/spot off and ``spark.databricks.streaming.realTimeMode.enabled``.
"""

from pyspark.sql.streaming import StreamingQuery


def start(events, writer, checkpoint, trigger: str = "5 seconds") -> StreamingQuery:
    """Start the real-time query writing events with severity >= 3 through ``writer``."""
    return (events.where("severity >= 3")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
