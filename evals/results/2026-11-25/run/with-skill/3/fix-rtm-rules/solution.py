"""The alerts query, fixed so real-time mode accepts it.

What was rejected, and the fix:

1. ``foreachBatch`` is not a real-time sink: ``start()`` fails with
   STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST. Real-time mode
   hands rows to the sink one by one as they arrive, so the sink is a
   ``foreach`` writer (here the idempotent ``writer`` we are given) or Kafka.
   (``batch_df.write.saveAsTable`` per batch belongs to a micro-batch query.)
2. No output mode means append, which real-time mode refuses
   (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED): ``outputMode("update")``.
3. ``realTime="1 second"`` is under open-source Spark's 5-second minimum
   (INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL). The duration is the
   checkpoint interval, not a latency target: rows still flow as they arrive.
   "5 seconds" is the smallest accepted value; production queries usually use
   minutes (fewer commits and batch-boundary pauses, but a longer replay after
   a failure and, for a Python foreach writer in open-source Spark, a longer
   worst-case delivery delay).

Delivery to a ``foreach`` sink is at-least-once (a failed long batch is
replayed), which is why the writer must be idempotent (upsert on a key with a
version guard), never return False from ``open()``, and flush from
``process()``/a timer rather than only in ``close()``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery


def start(events: DataFrame, writer: Any, checkpoint: str, trigger: str = "5 seconds") -> StreamingQuery:
    """Severe events (severity >= 3) into ``writer`` in real-time mode."""
    return (events.where("severity >= 3")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
