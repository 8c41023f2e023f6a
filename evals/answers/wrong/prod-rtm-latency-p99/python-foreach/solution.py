"""A hardened Python foreach writer (flushes every 100 ms) on the shortest real-time trigger."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def start(df, dsn, table, checkpoint):
    writer = PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("id",), max_dwell_ms=100))
    return (df.writeStream.foreach(writer).outputMode("update").option("checkpointLocation", checkpoint)
            .trigger(realTime="5 seconds").start())
