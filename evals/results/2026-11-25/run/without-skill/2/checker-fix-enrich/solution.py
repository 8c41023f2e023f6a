"""Fixed evals/files/checker_enrich.py (same behaviour, real-time-mode compliant).

Problems in the original (found by reading it; the pack's checker could not be run here):
  * events.join(accounts, "account") without a broadcast hint - in real-time mode a stream-static join
    must broadcast the static side (a shuffle join adds a shuffle stage / is not allowed); whether the
    planner broadcasts on its own depends on size estimates and AQE, so make it explicit.
  * no outputMode -> default "append"; real-time mode accepts only "update".
  * trigger(realTime="2 seconds") is below the 5 s minimum batch duration
    (spark.sql.streaming.realTimeMode.minBatchDuration) -> "5 minutes" (checkpoint interval only;
    per-record latency is unaffected).
Behaviour kept: payments with amount > 1000, inner join with accounts (payments of unknown accounts
are dropped, as before), key = payment id, value = JSON {id, account, amount, owner}.
The filter now runs before the join (same result, less work).
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    large = events.where(F.col("amount") > 1000)
    joined = large.join(F.broadcast(accounts), "account")
    return joined.select(F.col("id").cast("string").alias("key"),
                         F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"))


def start(events: DataFrame, accounts: DataFrame, bootstrap: str, topic: str,
          checkpoint: str) -> StreamingQuery:
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
