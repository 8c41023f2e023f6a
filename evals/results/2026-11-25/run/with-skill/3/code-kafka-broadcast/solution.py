"""Large payments enriched with account owners, Kafka -> Kafka, in real-time mode.

Real-time mode (open-source Spark 4.3 or Databricks) accepts a stream-static
join only when the static side is broadcast: the join must not shuffle
(a plain join dies with STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST).
`accounts` is small, so `F.broadcast(accounts)` copies it to every executor
(Databricks: broadcast side 10 MB or less). A left join keeps payments of
unknown accounts with a null owner. Everything else is built-in expressions
(`to_json`, `struct`, casts), which real-time mode allows; no Python UDF.

The query is stateless: it needs one task slot per Kafka partition of the
payments topic (no shuffle stage). The Kafka sink is at-least-once: a replayed
long batch republishes its payments, so consumers dedupe on the key (payment id).
Whether a running real-time query sees changes to `accounts` is not
documented: restart the query to pick up new reference data.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

MIN_AMOUNT = 1000


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    """Payments with amount > 1000, joined to ``accounts``; exactly the columns ``key`` and ``value``.

    ``key`` = the payment id (string); ``value`` = JSON with id, account, amount, owner, country.
    """
    large = events.where(F.col("amount") > F.lit(MIN_AMOUNT))
    enriched = large.join(F.broadcast(accounts), on="account", how="left")
    # id, account, amount, then the account attributes (owner, country, ...)
    value_columns = ["id", "account", "amount"] + [c for c in accounts.columns if c != "account"]
    return enriched.select(
        F.col("id").cast("string").alias("key"),
        # keep "owner": null in the JSON for a payment of an unknown account
        F.to_json(F.struct(*value_columns), {"ignoreNullFields": "false"}).alias("value"),
    )


def start(events: DataFrame, accounts: DataFrame, bootstrap: str, topic: str,
          checkpoint: str) -> StreamingQuery:
    """Publish the enriched large payments to ``topic`` (e.g. "large-payments") in real-time mode."""
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")            # the only output mode real-time mode accepts
            .trigger(realTime="5 minutes")   # checkpoint interval, not a latency target
            .start())
