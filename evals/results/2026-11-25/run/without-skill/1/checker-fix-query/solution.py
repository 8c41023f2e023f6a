"""Real-time query into Lakebase through the given foreach writer (fixed).

Problems in the original (found by review; the pack's checker could not be
run in this environment, see NOTES.md):
  1. foreachBatch(...)       - not supported in real-time mode; the row-level
                               foreach(writer) sink is (Kafka and foreach are
                               the real-time sinks).
  2. outputMode("append")    - real-time mode only accepts "update".
  3. realTime="500 milliseconds" - below the minimum real-time batch duration
                               (spark.sql.streaming.realTimeMode.minBatchDuration,
                               5 s by default); the duration is the checkpoint
                               interval, not the latency, so use minutes.
The filter `severity >= 3` is kept unchanged.
"""
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

REAL_TIME_BATCH_DURATION = "5 minutes"


def start(events: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    severe = events.where("severity >= 3")
    return (
        severe.writeStream.foreach(writer)
        .outputMode("update")
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )
