"""Another valid split of the 4 slots: 1 source task + 3 shuffle partitions; options passed one by one."""

from pyspark.sql import functions as F

SHUFFLE_PARTITIONS = 3
KAFKA_OPTIONS = {"kafka.bootstrap.servers": "broker:9092", "subscribe": "clicks", "maxPartitions": 1}


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", SHUFFLE_PARTITIONS)


def start(spark, writer, checkpoint):
    configure(spark)
    reader = spark.readStream.format("kafka")
    for key, value in KAFKA_OPTIONS.items():
        reader = reader.option(key, value)
    pages = reader.load().select(F.col("key").cast("string").alias("page"))
    q = pages.groupBy("page").count().writeStream.foreach(writer)
    return q.outputMode("update").option("checkpointLocation", checkpoint).trigger(realTime="1 minute").start()
