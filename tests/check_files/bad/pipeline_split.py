"""Builds the real-time query in one function and starts it in another (known-wrong shapes)."""

from pyspark.sql import DataFrame, functions as F

TRIGGER = "500 milliseconds"


def micro_batch_interval():
    return "1 second"


def build_writer(events: DataFrame, sink):
    sessions = events.groupBy(F.session_window("ts", "5 minutes"), "user").count()
    return sessions.writeStream.foreachBatch(sink).outputMode("complete")


def start(events: DataFrame, sink, checkpoint: str):
    stream_writer = build_writer(events, sink)
    return stream_writer.option("checkpointLocation", checkpoint).trigger(realTime=TRIGGER).start()


def start_with(stream_writer, checkpoint: str):
    return stream_writer.option("checkpointLocation", checkpoint).trigger(realTime=micro_batch_interval()).start()


def run(spark, sink):
    events = spark.readStream.format("rate").load().withColumnRenamed("timestamp", "ts")
    start(events, sink, "/tmp/cp-a")
    start_with(build_writer(events.mapInPandas(lambda it: it, events.schema), sink), "/tmp/cp-b")
