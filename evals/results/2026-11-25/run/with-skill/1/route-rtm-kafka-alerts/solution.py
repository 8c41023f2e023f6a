"""Kafka `readings` -> Kafka `alerts` (temp > 90), keyed by device, in real-time mode.

Real-time mode (``trigger(realTime=...)``, Spark 4.1+; the Python keyword from 4.2, stateful
operators from 4.3; Databricks Runtime 16.4 LTS+) processes each record as it arrives, with
millisecond latency, and Kafka is a real-time sink everywhere (a JVM sink, so no Python-worker
buffering). The query is stateless (filter + projection, built-in functions only), so it needs
one task slot per Kafka partition of `readings` and no shuffle.

- ``.trigger(realTime="5 minutes")`` is the checkpoint interval, not a latency target
  (open-source minimum 5 seconds); ``outputMode("update")`` is required.
- Delivery is at-least-once: after a failure the unfinished long batch is re-sent, so an alert
  consumer must tolerate duplicates.
- On Databricks: classic compute, Photon/autoscaling/spot off, cluster conf
  ``spark.databricks.streaming.realTimeMode.enabled true``.
- Needs the spark-sql-kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).
"""

from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

READING_SCHEMA = StructType([
    StructField("device", StringType()),
    StructField("temp", DoubleType()),
])
THRESHOLD = 90
ALERTS_TOPIC = "alerts"


def _parsed(readings):
    """Accept the raw Kafka DataFrame (value = JSON bytes) or already-parsed (device, temp)."""
    if "temp" in readings.columns and "device" in readings.columns:
        return readings.select("device", "temp")
    reading = F.from_json(F.col("value").cast("string"), READING_SCHEMA)
    return readings.select(reading.alias("r")).select("r.device", "r.temp")


def alerts(readings):
    """(key, value) Kafka records for every reading with temp > 90, keyed by device."""
    hot = _parsed(readings).where(F.col("temp") > THRESHOLD)
    return hot.select(
        F.col("device").cast("string").alias("key"),
        F.to_json(F.struct("device", "temp")).alias("value"),
    )


def read_readings(spark, bootstrap, topic="readings"):
    """The Kafka source (optional helper)."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            .load())


def start(readings, bootstrap, checkpoint):
    return (alerts(readings).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", ALERTS_TOPIC)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
