"""A user's real-time query into Lakebase, fixed so the pack's checker reports nothing.

Checker findings on the original (python3 -m rtm_lakebase.check checker_query.py):
- RTM003 foreachBatch is rejected in a real-time query -> ``.foreach(writer)`` (the
  idempotent foreach writer we receive: open/process/close, upserting on a key);
- RTM004 outputMode("append") -> ``.outputMode("update")``, the only mode real-time runs;
- RTM002 realTime="500 milliseconds" is under the 5-second minimum -> ``"5 seconds"``.
  The duration is the checkpoint interval (offsets committed, writer open()/close()
  once per long batch), not a latency: rows are processed as they arrive. Use
  minutes in production if the sink's worst-case delay allows (``trigger=``).
"""

from pyspark.sql.streaming import StreamingQuery


def start(events, writer, checkpoint, trigger: str = "5 seconds") -> StreamingQuery:
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
