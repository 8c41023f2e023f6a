"""Kafka `readings` -> Kafka `alerts` for every reading with temp > 90, in Spark real-time mode.

Why real-time mode: the requirement is "well under a second". Micro-batch triggers cannot get there
(each micro-batch plans, commits offsets and schedules tasks), real-time mode keeps long-running tasks
that process each record as it arrives (tens of ms end to end). This query is stateless (parse,
filter, project), so it is the cheapest possible real-time query: one stage, one task per source task.

Requirements worth knowing (open-source Spark 4.3 and Databricks):
  * output mode must be "update" (append is rejected with STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED,
    even for a stateless query);
  * the realTime trigger value is the *batch (checkpoint) duration*, not a latency; it must be at least
    spark.sql.streaming.realTimeMode.minBatchDuration (5 s by default on OSS); 5 minutes is the usual value;
  * the cluster needs one free task slot per source task (Kafka partitions, or `maxPartitions` if set);
  * on Databricks: classic compute, DBR 16.4 LTS+, Photon/autoscaling off,
    spark.databricks.streaming.realTimeMode.enabled=true.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import DoubleType, StringType, StructField, StructType

ALERTS_TOPIC = "alerts"
THRESHOLD = 90
REALTIME_BATCH_DURATION = "5 minutes"

READING_SCHEMA = StructType([
    StructField("device", StringType()),
    StructField("temp", DoubleType()),
])


def _parsed(readings: DataFrame) -> DataFrame:
    """Accept either the raw Kafka DataFrame (binary `value` holding JSON) or an already parsed one."""
    cols = set(readings.columns)
    if {"device", "temp"} <= cols:
        return readings.select(F.col("device").cast("string").alias("device"),
                               F.col("temp").cast("double").alias("temp"))
    if "value" in cols:
        r = F.from_json(F.col("value").cast("string"), READING_SCHEMA).alias("r")
        return readings.select(r).select("r.device", "r.temp")
    raise ValueError(f"readings needs either (device, temp) or a Kafka `value` column, got {readings.columns}")


def alerts(readings: DataFrame) -> DataFrame:
    """Readings hotter than 90 as Kafka records: key = device, value = the reading as JSON.

    Readings whose JSON does not parse or has no temp are not alerts (temp > 90 is false for null).
    """
    hot = _parsed(readings).where(F.col("temp") > F.lit(THRESHOLD))
    return hot.select(
        F.col("device").cast("string").alias("key"),
        F.to_json(F.struct("device", "temp")).alias("value"),
    )


def start(readings: DataFrame, bootstrap: str, checkpoint: str) -> StreamingQuery:
    """Start the real-time query writing to the Kafka topic `alerts`."""
    return (alerts(readings).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", ALERTS_TOPIC)
            # Do not let the producer wait to fill batches: send each alert immediately.
            .option("kafka.linger.ms", "0")
            .option("checkpointLocation", checkpoint)
            .queryName("readings-to-alerts")
            .outputMode("update")                       # the only output mode real-time mode accepts
            .trigger(realTime=REALTIME_BATCH_DURATION)  # real-time mode; 5 min = checkpoint interval
            .start())


def read_readings(spark, bootstrap: str, topic: str = "readings") -> DataFrame:
    """Convenience: the Kafka source for the `readings` topic (pass its result to start())."""
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            # lower consumer wait on the broker side; default fetch.max.wait.ms is 500 ms
            .option("kafka.fetch.max.wait.ms", "10")
            .load())
