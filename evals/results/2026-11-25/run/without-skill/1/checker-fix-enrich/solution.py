"""Large-payment enrichment to Kafka in real-time mode (fixed).

Problems in the original (found by review; the pack's checker could not be
run in this environment, see NOTES.md):
  1. `events.join(accounts, "account")` without a broadcast hint: the static
     table can be planned as a shuffle (sort-merge) join. A real-time
     stream-static join must broadcast the small table; a shuffle join also
     adds a stage that needs more task slots. -> F.broadcast(accounts).
  2. No output mode -> default "append"; real-time mode only accepts "update".
  3. realTime="2 seconds" is below the 5 s minimum real-time batch duration
     (spark.sql.streaming.realTimeMode.minBatchDuration); it is the
     checkpoint interval, not the latency -> "5 minutes".
  4. key = id without a cast: the Kafka sink needs string/binary key; cast it.
  5. The amount filter now runs before the join (fewer probe rows); same result.
Behaviour kept: amount > 1000, key = payment id, value = JSON with id,
account, amount, owner; inner join (payments of unknown accounts are dropped,
which the spec allows).
"""
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

REAL_TIME_BATCH_DURATION = "5 minutes"


def enrich(events: DataFrame, accounts: DataFrame) -> DataFrame:
    large = events.where(F.col("amount") > 1000)
    joined = large.join(F.broadcast(accounts.select("account", "owner")), "account")
    return joined.select(
        F.col("id").cast("string").alias("key"),
        F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"),
    )


def start(events, accounts, bootstrap, topic, checkpoint) -> StreamingQuery:
    return (
        enrich(events, accounts)
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
        .start()
    )
