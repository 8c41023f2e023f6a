"""Fixed version of evals/files/broken_query.py: a real-time query that starts.

What was rejected, and the fix
------------------------------
1. foreachBatch(save) -> foreachBatch is not a real-time sink (it needs whole batches; real-time mode
   streams records through long-running tasks).  Real-time sinks are Kafka and foreach (plus
   console/memory for debugging).  saveAsTable into a Delta table is not a real-time sink either.
   -> write through the idempotent foreach writer we are given: .foreach(writer).
2. No output mode (default "append") -> real-time mode accepts only "update"
   (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED).  -> .outputMode("update").
3. trigger(realTime="1 second") -> below the minimum real-time batch duration
   (spark.sql.streaming.realTimeMode.minBatchDuration, 5 s on open-source Spark:
   INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL).  The duration is a checkpoint interval, not
   a latency target, so a longer one costs no latency.  -> default "5 minutes".
The filter (severity >= 3) is stateless and stays as it is.
"""

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery


def start(events: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    return (events.where("severity >= 3")
            .writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
