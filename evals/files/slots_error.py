"""A user's real-time query that fails at start on a 4-slot cluster (input of the eval task debug-slots-error).

The driver log says:

    org.apache.spark.SparkIllegalStateException: [CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT] ...
    Query clicks-per-page cannot start in real-time mode on this cluster.

The topic `clicks` has 8 partitions.
"""

from pyspark.sql import functions as F


def configure(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "6")


def start(spark, writer, checkpoint):
    configure(spark)
    clicks = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", "broker:9092")
              .option("subscribe", "clicks")
              .load())
    counts = clicks.groupBy(F.col("key").cast("string").alias("page")).count()
    return (counts.writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
