"""Builds the real-time query in one function and starts it in another (the shape of a tested module)."""

from pyspark.sql import DataFrame, functions as F

TRIGGER = "10 seconds"


def build_writer(events: DataFrame, writer):
    """The writer, without a trigger: the caller decides real-time or micro-batch."""
    counts = events.groupBy(F.window("ts", "1 minute"), "user").count()
    return counts.writeStream.foreach(writer).outputMode("update")


def start(events: DataFrame, writer, checkpoint: str):
    stream_writer = build_writer(events, writer)
    return stream_writer.option("checkpointLocation", checkpoint).trigger(realTime=TRIGGER).start()


def start_with(stream_writer, checkpoint: str):
    return stream_writer.option("checkpointLocation", checkpoint).trigger(realTime=TRIGGER).start()


def run(spark, writer):
    events = spark.readStream.format("rate").load().withColumnRenamed("timestamp", "ts").withColumn("user", F.col("value") % 10)
    start(events, writer, "/tmp/cp-a")
    start_with(build_writer(events, writer), "/tmp/cp-b")
