"""A user's real-time query into Lakebase, fixed (checker: RTM003, RTM004, RTM002).

- RTM003: ``foreachBatch`` is rejected in real-time mode; rows go through the foreach
  writer ``writer`` (a ForeachWriter-style object with open/process/close, e.g. the pack's
  ``rtm_lakebase.sink.PostgresForeachWriter``). Delivery is at-least-once, so the writer
  must be idempotent (upsert on a key with a version guard, or insert-if-absent).
- RTM004: real-time mode runs only ``outputMode("update")``.
- RTM002: the real-time duration is the checkpoint interval (minimum 5 seconds), not a
  latency; "5 minutes" is the usual value. Latency comes from real-time mode itself.
"""


def start(events, writer, checkpoint):
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .start())
