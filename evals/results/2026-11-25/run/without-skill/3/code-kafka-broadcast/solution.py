"""Large payments enriched with a small static `accounts` table, published to Kafka in real-time mode.

Shape (one stage, no shuffle, no state):
    payments (id, account, amount)  --filter amount > 1000-->  broadcast-hash LEFT join accounts
    --> key = id, value = JSON {id, account, amount, owner, country}  --> Kafka topic

* Stream-static joins in real-time mode must be broadcast joins (BroadcastHashJoinExec is in the
  real-time operator allowlist; a sort-merge join/shuffle of the static side is not what we want) ->
  explicit F.broadcast() hint, so the plan does not depend on autoBroadcastJoinThreshold.
* Left join: a payment of an unknown account is still published, with "owner": null (the task allows
  either; dropping large payments silently seemed the worse default). Use how="inner" to drop them.
* Filter first, so only large payments are probed against the broadcast table.
* `accounts` is read once when the query starts (it is static): restart the query to pick up changes.
* Output mode "update" (the only one real-time mode accepts) and a realTime trigger; the value
  "5 minutes" is the checkpoint/batch duration, not a latency. Kafka is an allowed real-time sink.
  Delivery to Kafka is at-least-once (records of a batch that is retried can be produced twice); the
  key (payment id) lets consumers de-duplicate.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

THRESHOLD = 1000
REALTIME_BATCH_DURATION = "5 minutes"
JOIN_TYPE = "left"   # "inner" is also acceptable: drops payments of unknown accounts


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    """Large payments joined with their account owner, as Kafka (key, value) records."""
    large = events.where(F.col("amount") > F.lit(THRESHOLD))
    acct = accounts.select("account", "owner", "country")
    joined = large.join(F.broadcast(acct), on="account", how=JOIN_TYPE)
    value = F.to_json(
        F.struct("id", "account", "amount", "owner", "country"),
        {"ignoreNullFields": "false"},     # keep "owner": null for unknown accounts
    )
    return joined.select(F.col("id").cast("string").alias("key"), value.alias("value"))


def start(events: DataFrame, accounts: DataFrame, bootstrap: str, topic: str,
          checkpoint: str) -> StreamingQuery:
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("kafka.linger.ms", "0")            # send immediately, do not wait to fill batches
            .option("checkpointLocation", checkpoint)
            .queryName("large-payments")
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
