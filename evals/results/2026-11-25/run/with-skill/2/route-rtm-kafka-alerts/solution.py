"""Kafka `readings` -> alerts (temp > 90) -> Kafka `alerts`, in Spark real-time mode.

Why real-time mode: the job is a stateless filter/projection from Kafka to Kafka,
which is exactly what real-time mode (RTM) runs with millisecond engine latency.
Kafka is a real-time source and sink everywhere and both stay in the JVM, so no
Python worker sits on the path (no Python UDF, no Python foreach).

Requirements
- Open-source Spark: PySpark 4.2+ for ``trigger(realTime=...)`` (4.3 recommended),
  plus the Kafka connector (``org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>``).
  No enabling flag is needed.
- Databricks: Runtime 16.4 LTS or later, classic compute (dedicated access mode,
  or standard for Python), Photon/autoscaling/spot OFF, and the cluster-level
  Spark config ``spark.databricks.streaming.realTimeMode.enabled true``.
- Slots: a real-time query keeps every task running for the whole long batch.
  This query has no shuffle, so it needs one free task slot per partition of
  `readings` (e.g. 8 partitions -> at least 8 cores, ideally ~2x for headroom).

Notes
- ``realTime="5 minutes"`` is the checkpoint interval (how often offsets are
  committed), NOT a latency target: rows are published as they arrive.
  Open-source Spark rejects anything under 5 seconds.
- Real-time mode only accepts ``outputMode("update")``.
- Delivery to Kafka is at-least-once: after a failure the unfinished long batch
  is replayed, so consumers of `alerts` should tolerate duplicates (dedupe on
  device + reading identity if that matters).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

ALERT_TOPIC = "alerts"
TEMP_THRESHOLD = 90.0

READING_SCHEMA = StructType([
    StructField("device", StringType()),
    StructField("temp", DoubleType()),
])


def alerts(readings: DataFrame) -> DataFrame:
    """Kafka records of topic `readings` -> Kafka records (key, value) for `alerts`.

    ``readings`` is the DataFrame of a Kafka source (binary ``value`` holding
    JSON ``{"device": ..., "temp": ...}``). Only built-in JVM expressions are
    used (from_json, filter, to_json), all allowed in real-time mode.
    Unparsable records or a missing temp give NULL and are not alerted.
    """
    parsed = readings.select(
        F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r")
    ).select("r.device", "r.temp")
    hot = parsed.where(F.col("temp") > F.lit(TEMP_THRESHOLD))
    return hot.select(
        F.col("device").cast("string").alias("key"),
        F.to_json(F.struct("device", "temp")).alias("value"),
    )


def start(readings: DataFrame, bootstrap: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time Kafka -> Kafka query and return it.

    ``readings`` is e.g.::

        spark.readStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", "readings")
             .option("startingOffsets", "latest")
             .load()
    """
    return (
        alerts(readings)
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", ALERT_TOPIC)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")              # the only output mode real-time mode accepts
        .trigger(realTime="5 minutes")     # checkpoint interval, not latency
        .start()
    )


def read_readings(spark, bootstrap: str, topic: str = "readings") -> DataFrame:
    """Convenience: the Kafka source DataFrame for `readings`."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "latest")
        .option("failOnDataLoss", "true")
        .load()
    )
