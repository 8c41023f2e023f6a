"""A user's real-time query, fixed so it starts in real-time mode.

What was rejected, and the fix:
- ``foreachBatch`` is not allowed in real-time mode (``OPERATOR_OR_SINK_NOT_IN_ALLOWLIST``):
  write through the ``foreach`` writer ``writer`` instead. Delivery is at-least-once, so the
  writer must be idempotent (it is: upsert / insert-if-absent on a key). If you really need the
  Delta ``saveAsTable("alerts")`` append, keep ``foreachBatch`` and use a micro-batch trigger.
- ``realTime="1 second"`` is under open-source Spark's 5-second minimum; the duration is the
  checkpoint interval, not a latency target: "5 minutes".
- No output mode means ``append``, which real-time mode rejects: ``outputMode("update")``.
"""


def start(events, writer, checkpoint):
    return (events.where("severity >= 3")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
