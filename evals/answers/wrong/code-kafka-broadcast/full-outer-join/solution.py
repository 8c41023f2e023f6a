"""Large payments, enriched with a broadcast static table, from Kafka to Kafka in real-time mode."""

from pyspark.sql import DataFrame, functions as F


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    joined = events.join(F.broadcast(accounts), "account", "full_outer")
    large = joined.where(F.col("amount") > 1000)
    return large.select(F.col("id").alias("key"),
                        F.to_json(F.struct("id", "account", "amount", "owner", "country")).alias("value"))


def start(events: DataFrame, accounts: DataFrame, bootstrap: str, topic: str, checkpoint: str):
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
