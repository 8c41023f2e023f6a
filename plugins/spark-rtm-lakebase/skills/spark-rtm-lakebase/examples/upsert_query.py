"""The quick start: stream events into a keyed table with the idempotent upsert writer.

``start_upsert_query(events, dsn, table, checkpoint)`` upserts on ``id``,
keeping the row with the highest ``version`` (a replayed older row never wins),
in a real-time query (``real_time=True``) or a micro-batch one. Change the key,
version column and batching to your table's.
"""

from __future__ import annotations

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


# --8<-- [start:start_query]
def start_upsert_query(events, dsn: str, table: str, checkpoint: str, real_time: bool = True):
    """Stream ``events`` into ``table`` with the idempotent upsert writer."""
    writer = PostgresForeachWriter(
        dsn,  # or ConnectionSettings(host=..., password=Secret(...)) / password_provider=...
        SinkSettings(table=table, key_columns=("id",), version_column="version",
                     max_batch_rows=1000, max_dwell_ms=100),
    )
    stream = (events.writeStream.foreach(writer)
              .outputMode("update")
              .option("checkpointLocation", checkpoint))
    if real_time:
        # 5 s is the open-source minimum and keeps tests short; production uses minutes
        # (references/trigger-and-cost-optimization.md, "Trigger length").
        stream = stream.trigger(realTime="5 seconds")
    else:
        stream = stream.trigger(processingTime="0 seconds")
    return stream.start()
# --8<-- [end:start_query]
