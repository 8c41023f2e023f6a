"""slots_error.py fixed for 4 task slots: 2 source tasks (maxPartitions) + 2 shuffle partitions."""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 2
KAFKA_OPTIONS = {"kafka.bootstrap.servers": "broker:9092", "subscribe": "clicks", "maxPartitions": "2"}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))


def start(spark, writer, checkpoint):
    configure(spark)
    clicks = spark.readStream.format("kafka").options(**KAFKA_OPTIONS).load()
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
