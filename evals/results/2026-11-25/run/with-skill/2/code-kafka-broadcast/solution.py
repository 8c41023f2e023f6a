"""Real-time mode: enrich payments with a broadcast static table and publish large ones to Kafka.

Pipeline: payments (parsed Kafka stream: id, account, amount)
  -> amount > 1000
  -> LEFT join with broadcast(accounts)  (account, owner, country)
  -> Kafka record: key = payment id, value = JSON {id, account, amount, owner, country}
  -> topic `large-payments`, real-time trigger, update output mode.

Why this shape
- Real-time mode accepts a stream-static join only when the static side is
  broadcast (a join that shuffles is rejected with
  STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST), so ``accounts``
  is wrapped in ``F.broadcast``. Keep it small: it is copied to every executor
  (Databricks documents a broadcast side of 10 MB or less). A running query is
  not documented to see changes to the static side: restart it to pick up new
  reference data.
- LEFT join: a payment of an unknown account is still published, with
  owner/country NULL (``to_json`` leaves NULL fields out of the JSON).
- The filter runs before the join, so only large payments are looked up.
- Only built-in JVM expressions (no Python UDF): allowed in real-time mode.
- No shuffle: the query needs one task slot per Kafka partition of the input.
- Requirements: open-source Spark 4.2+ (4.3 recommended) with the
  spark-sql-kafka connector, no flag; or Databricks Runtime 16.4 LTS+, classic
  compute, Photon/autoscaling/spot off and the cluster flag
  ``spark.databricks.streaming.realTimeMode.enabled true``.
- The Kafka sink is at-least-once: a failure replays the unfinished long batch,
  so consumers should dedupe on the key (payment id).
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

MIN_AMOUNT = 1000


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    """Large payments (amount > 1000) enriched with their account's owner and country.

    Returns exactly two STRING columns for the Kafka sink: ``key`` (payment id)
    and ``value`` (the enriched row as JSON).
    """
    large = events.select("id", "account", "amount").where(F.col("amount") > F.lit(MIN_AMOUNT))
    ref = accounts.select("account", "owner", "country")
    enriched = large.join(F.broadcast(ref), on="account", how="left")
    return enriched.select(
        F.col("id").cast("string").alias("key"),
        F.to_json(F.struct("id", "account", "amount", "owner", "country")).alias("value"),
    )


def start(events: DataFrame, accounts: DataFrame, bootstrap: str, topic: str,
          checkpoint: str) -> StreamingQuery:
    """Start the real-time query publishing enriched large payments to ``topic``."""
    return (
        enrich(events, accounts)
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)                      # e.g. "large-payments"
        .option("checkpointLocation", checkpoint)    # one durable location per query
        .outputMode("update")                        # the only mode real-time mode accepts
        .trigger(realTime="5 minutes")               # checkpoint interval, not a latency
        .start()
    )
