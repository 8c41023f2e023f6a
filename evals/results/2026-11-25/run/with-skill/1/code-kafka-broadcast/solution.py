"""Large payments enriched with a broadcast static `accounts` table, published to Kafka in
real-time mode (open-source Spark 4.3 or Databricks).

- Real-time mode allows a stream-static join only when it needs no shuffle: the static side is
  wrapped in ``broadcast()`` (a left join keeps payments of unknown accounts with a null
  owner/country). Keep ``accounts`` small (Databricks: broadcast side of 10 MB or less).
- Built-in functions only (no Python UDF, which open-source real-time mode rejects).
- Kafka sink: ``key`` = payment id, ``value`` = JSON of id, account, amount, owner, country;
  ``outputMode("update")``; ``trigger(realTime="5 minutes")`` (the checkpoint interval, not a
  latency). Delivery is at-least-once: consumers must tolerate a replayed payment (same key).
- Needs the spark-sql-kafka connector on the classpath; on Databricks the cluster flag
  ``spark.databricks.streaming.realTimeMode.enabled`` and classic compute.
"""

from pyspark.sql import functions as F

MIN_AMOUNT = 1000


def enrich(events, accounts):
    """(key, value): payments with amount > 1000, enriched with their account's owner/country."""
    large = events.where(F.col("amount") > MIN_AMOUNT)
    acct = accounts.select("account", "owner", "country")
    joined = large.join(F.broadcast(acct), "account", "left")
    return joined.select(
        F.col("id").cast("string").alias("key"),
        # keep null owner/country in the JSON (to_json drops null fields by default)
        F.to_json(F.struct("id", "account", "amount", "owner", "country"),
                  {"ignoreNullFields": "false"}).alias("value"),
    )


def start(events, accounts, bootstrap, topic="large-payments", checkpoint=None):
    if not checkpoint:
        raise ValueError("a checkpoint location is required (one per query, on durable storage)")
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
