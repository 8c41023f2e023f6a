"""Readings over 90 degrees to `alerts`; the trigger and sink settings come from dicts, the query from a helper."""

from pyspark.sql import DataFrame, functions as F

TRIGGER = {"realTime": "1 minute"}
SINK = {"format": "kafka", "outputMode": "update"}


def alerts(readings: DataFrame) -> DataFrame:
    body = F.from_json(F.col("value").cast("string"), "device STRING, temp DOUBLE")
    hot = readings.withColumn("r", body).where("r.temp > 90")
    return hot.select(F.col("r.device").alias("key"), F.to_json("r").alias("value"))


def _publish(df: DataFrame, bootstrap: str, checkpoint: str):
    return (df.writeStream.option("kafka.bootstrap.servers", bootstrap).option("topic", "alerts")
            .option("checkpointLocation", checkpoint).trigger(**TRIGGER))


def start(readings, bootstrap, checkpoint):
    return _publish(alerts(readings), bootstrap, checkpoint).start(**SINK)
