"""Hot sensor readings -> Kafka topic `alerts`, in Structured Streaming real-time mode.

Kafka in, Kafka out, a filter and a projection only: that is the case real-time
mode is built for. The query is stateless (no shuffle), every operator is a
built-in JVM expression, and Spark's Kafka sink stays in the JVM, so a reading
goes from the `readings` topic to the `alerts` topic in milliseconds.

Real-time mode rules applied here:

- `.trigger(realTime="5 minutes")`: a duration string (never a boolean). The
  duration is how often offsets are checkpointed, not a latency target; records
  flow continuously inside each long batch. Open-source Spark refuses less than
  5 seconds.
- `.outputMode("update")`: the only output mode real-time mode accepts (leaving
  it out means append, which is rejected).
- Task slots: a stateless query needs one slot per Kafka partition of `readings`
  for the whole long batch (no shuffle stage). Size the cluster for it.
- Delivery into Kafka is at-least-once: after a failure the unfinished long
  batch is replayed, so consumers of `alerts` must tolerate a repeated alert
  (dedupe on device + reading, or treat alerts as idempotent).
- Open-source Spark 4.2+ (the Python `realTime=` keyword; 4.3 recommended) with
  the spark-sql-kafka connector on the classpath; on Databricks, Runtime 16.4 LTS
  or later on classic compute with `spark.databricks.streaming.realTimeMode.enabled`
  set in the cluster configuration (Photon, autoscaling and spot off).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

ALERTS_TOPIC = "alerts"
READINGS_TOPIC = "readings"
THRESHOLD = 90

#: The JSON payload of a record of `readings`.
READING_SCHEMA = "device STRING, temp DOUBLE"


def _parsed(readings: DataFrame) -> DataFrame:
    """(device, temp) rows from either a raw Kafka DataFrame or an already parsed one.

    A raw Kafka source has a binary ``value`` holding the JSON ``{device, temp}``;
    ``from_json`` is a built-in expression, so it is allowed in real-time mode
    (a Python UDF would not be, in open-source Spark).
    """
    if "temp" in readings.columns and "device" in readings.columns:
        return readings.select("device", "temp")
    reading = F.from_json(F.col("value").cast("string"), READING_SCHEMA)
    return readings.select(reading.alias("r")).select("r.device", "r.temp")


def alerts(readings: DataFrame) -> DataFrame:
    """Every reading with temp > 90, shaped for the Kafka sink: ``key`` = device, ``value`` = the reading as JSON."""
    hot = _parsed(readings).where(F.col("temp") > F.lit(THRESHOLD))
    return hot.select(
        F.col("device").cast("string").alias("key"),
        F.to_json(F.struct("device", "temp")).alias("value"),
    )


def read_readings(spark, bootstrap: str, topic: str = READINGS_TOPIC) -> DataFrame:
    """The `readings` topic as a streaming DataFrame (Kafka is a real-time source)."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            .option("failOnDataLoss", "true")
            .load())


def start(readings: DataFrame, bootstrap: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time query publishing alerts to the `alerts` topic; returns the running query."""
    return (alerts(readings).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", ALERTS_TOPIC)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")  # checkpoint interval, not a latency target
            .start())
