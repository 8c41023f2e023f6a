"""Fixed version of evals/files/broken_query.py.

The original was rejected at start for three real-time-mode rules:
  1. foreachBatch is not a real-time sink (STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST:
     ForeachBatchSink is not in the sink allowlist) -> write row by row with foreach(writer), the
     idempotent foreach writer we are given (a batch `saveAsTable` has no place in real-time mode; Delta
     is not a real-time sink either).
  2. No output mode = append, which real-time mode rejects (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED)
     -> outputMode("update").
  3. trigger(realTime="1 second") is below the minimum batch duration
     (INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL: 1000 ms < spark.sql.streaming.realTimeMode.minBatchDuration,
     5000 ms by default). The value is the checkpoint interval of the long-running batches, not the
     latency: rows still flow through in milliseconds. Use the usual "5 minutes".
The filter is kept as is.
"""

from pyspark.sql.streaming import StreamingQuery

REALTIME_BATCH_DURATION = "5 minutes"


def start(events, writer, checkpoint) -> StreamingQuery:
    return (events.where("severity >= 3")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
