"""Readings over 90 degrees to the `alerts` topic in real-time mode."""

from pyspark.sql import DataFrame, functions as F

SCHEMA = "device STRING, temp DOUBLE"


def alerts(readings: DataFrame) -> DataFrame:
    parsed = readings.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    hot = parsed.where(F.col("temp") > 90)
    return hot.select(F.col("device").alias("key"), F.to_json(F.struct("device", "temp")).alias("value"))


def start(readings: DataFrame, bootstrap: str, checkpoint: str):
    return (alerts(readings).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", "alerts")
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
