"""Fixed evals/files/checker_query.py: real-time query into Lakebase through the foreach writer.

Problems in the original (found by reading it; the pack's checker could not be run here):
  * foreachBatch(lambda df, epoch: writer.write_batch(df, epoch)) - foreachBatch is not a real-time
    sink; real-time mode needs a row-at-a-time sink -> .foreach(writer).
  * outputMode("append") - real-time mode accepts only "update".
  * trigger(realTime="500 milliseconds") - below the 5 s minimum batch duration
    (spark.sql.streaming.realTimeMode.minBatchDuration) -> "5 minutes" (the duration is the
    checkpoint interval; per-record latency stays in milliseconds).
The filter severity >= 3 is kept.
"""

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery


def start(events: DataFrame, writer, checkpoint: str) -> StreamingQuery:
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
