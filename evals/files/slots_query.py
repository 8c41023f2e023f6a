"""A user's real-time query that fails with CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT on a 4-core cluster
(input of the eval task fix-insufficient-slots): an 8-partition Kafka topic, one aggregation, 200 shuffle partitions."""

from pyspark.sql import functions as F

KAFKA_OPTIONS = {"kafka.bootstrap.servers": "broker:9092", "subscribe": "clicks"}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "200")


def start(spark, writer, checkpoint):
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
