"""Fixed version of evals/files/checker_query.py (real-time query into Lakebase through a foreach writer).

Problems in the original (found by review - the pack's checker could not be run in this arm, see answer.json):
  1. foreachBatch(lambda df, epoch: writer.write_batch(df, epoch)) - foreachBatch is not a real-time-mode
     sink (STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST); the writer is a foreach writer
     (open/process/close), so pass it to foreach().
  2. outputMode("append") - real-time mode only accepts "update" (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED).
  3. trigger(realTime="500 milliseconds") - the value is the epoch/checkpoint duration, not a latency, and
     it is below the minimum (spark.sql.streaming.realTimeMode.minBatchDuration, 5 s on OSS Spark):
     INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL. Use "5 minutes".
The filter severity >= 3 is kept.
"""

from pyspark.sql.streaming import StreamingQuery

REALTIME_BATCH_DURATION = "5 minutes"


def start(events, writer, checkpoint) -> StreamingQuery:
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
