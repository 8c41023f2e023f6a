"""checker_enrich.py fixed: accounts broadcast, update mode, a real-time trigger of at least 5 seconds."""

from pyspark.sql import functions as F


def enrich(events, accounts):
    joined = events.join(F.broadcast(accounts), "account")
    large = joined
    return large.select(F.col("id").alias("key"),
                        F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"))


def start(events, accounts, bootstrap, topic, checkpoint):
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 seconds")
            .start())
