"""Fixed real-time query (was rejected at start).

What was wrong with the original
  1. `foreachBatch(save)` - real-time mode does not support foreachBatch (nor
     a table/Delta sink, which is what `save` wrote to). Supported sinks are
     Kafka and `foreach(ForeachWriter)`, so the rows go through the given
     idempotent foreach `writer`.
  2. No output mode -> the default `append`. Real-time mode only accepts
     `update` (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED).
  3. `trigger(realTime="1 second")` - the real-time batch duration must be at
     least spark.sql.streaming.realTimeMode.minBatchDuration (5 s by default;
     INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL). The duration is the
     checkpoint interval of the long-running batch, not the latency - rows
     are emitted as they arrive - so the usual 5 minutes is used.

The filter `severity >= 3` is a stateless built-in predicate, fine in
real-time mode.
"""
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

REAL_TIME_BATCH_DURATION = "5 minutes"


def start(events: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    return (
        events.where("severity >= 3")
        .writeStream.foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )
