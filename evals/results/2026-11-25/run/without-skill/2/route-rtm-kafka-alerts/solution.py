"""High-temperature alerts: Kafka `readings` -> Kafka `alerts` in real-time mode.

Lowest latency Spark offers for a Kafka -> Kafka stateless filter is Structured Streaming
*real-time mode* (trigger(realTime=...)), available in open-source Spark 4.1+ and on Databricks
(DBR 16.4 LTS+, with spark.databricks.streaming.realTimeMode.enabled=true on classic compute).
Records are processed by long-running tasks as they arrive (millisecond-scale end-to-end latency);
the trigger duration is only the checkpoint interval, not a latency target.

Real-time mode rules honoured here:
  * source and sink are Kafka (both supported);
  * only stateless, allow-listed operators: from_json / filter / to_json projections
    (no Python UDFs, no foreachBatch, no shuffles);
  * output mode "update" (the only one real-time mode accepts);
  * trigger duration >= 5 seconds (OSS minimum, spark.sql.streaming.realTimeMode.minBatchDuration);
    the default 5 minutes is used.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

ALERTS_TOPIC = "alerts"
THRESHOLD = 90

READING_SCHEMA = StructType([
    StructField("device", StringType()),
    StructField("temp", DoubleType()),
])


def _parsed(readings: DataFrame) -> DataFrame:
    """Accept either the raw Kafka frame (key/value binary) or an already parsed (device, temp) frame."""
    cols = set(readings.columns)
    if {"device", "temp"} <= cols:
        return readings.select("device", F.col("temp").cast("double").alias("temp"))
    # raw Kafka source rows: value holds the JSON reading
    return (readings
            .select(F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r"))
            .select("r.device", "r.temp"))


def alerts(readings: DataFrame) -> DataFrame:
    """Readings with temp > 90 as Kafka records: key = device, value = the reading as JSON."""
    r = _parsed(readings)
    hot = r.where(F.col("temp").isNotNull() & (F.col("temp") > F.lit(THRESHOLD)))
    return hot.select(
        F.col("device").cast("string").alias("key"),
        F.to_json(F.struct("device", "temp")).alias("value"),
    )


def start(readings: DataFrame, bootstrap: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time Kafka -> Kafka query."""
    return (alerts(readings)
            .writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", ALERTS_TOPIC)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .queryName("temperature-alerts")
            # realTime: the duration is the checkpoint interval (default 5 minutes); records are
            # still emitted within milliseconds.  Must be >= 5 s on open-source Spark.
            .trigger(realTime="5 minutes")
            .start())


def read_readings(spark, bootstrap: str):
    """Helper: the Kafka source for topic `readings` (raw frame, accepted by alerts())."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "readings")
            .load())
