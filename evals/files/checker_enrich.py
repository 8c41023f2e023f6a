"""A user's enrichment query (input of the eval task checker-fix-enrich)."""

from pyspark.sql import functions as F


def enrich(events, accounts):
    joined = events.join(accounts, "account")
    large = joined.where(F.col("amount") > 1000)
    return large.select(F.col("id").alias("key"),
                        F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"))


def start(events, accounts, bootstrap, topic, checkpoint):
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="2 seconds")
            .start())
