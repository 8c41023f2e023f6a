"""The pack's Python writer instead of its JVM writer (higher latency at modest rates)."""

from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings


def start(df, dsn, checkpoint):
    writer = PostgresForeachWriter(dsn, SinkSettings(table="events", key_columns=("id",), version_column="version"))
    return (df.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
