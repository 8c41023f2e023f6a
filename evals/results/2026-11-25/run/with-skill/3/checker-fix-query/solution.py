"""A user's real-time query into Lakebase, fixed so the pack's checker reports nothing and real-time mode runs it.

Checker findings on the original file (python3 -m rtm_lakebase.check):

- RTM003: ``foreachBatch`` is rejected in a real-time query (STREAMING_REAL_TIME_MODE.
  OPERATOR_OR_SINK_NOT_IN_ALLOWLIST at ``start()``) -> ``foreach(writer)``:
  real-time mode hands the sink rows one by one as they arrive.
- RTM004: ``outputMode("append")`` -> ``outputMode("update")``, the only output
  mode real-time mode runs.
- RTM002: ``realTime="500 milliseconds"`` is under open-source Spark's 5-second
  minimum -> ``"5 seconds"``. The duration is the checkpoint interval, not a
  latency target: rows flow through as they arrive either way.

The filter (severity >= 3) is kept. ``writer`` must be a ``foreach`` writer
(``open``/``process``/``close``) that is idempotent (upsert on a key with a
version guard), because delivery is at-least-once: a failed long batch is
replayed.
"""


def start(events, writer, checkpoint):
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 seconds")
            .start())
