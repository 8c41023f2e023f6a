"""Fixed version of evals/files/checker_enrich.py (large payments enriched with `accounts`, to Kafka, real-time mode).

Problems in the original (found by review - the pack's checker could not be run in this arm, see answer.json):
  1. No output mode -> default "append", which real-time mode rejects
     (STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED): set outputMode("update").
  2. trigger(realTime="2 seconds") is below the minimum epoch duration
     (spark.sql.streaming.realTimeMode.minBatchDuration, 5 s on OSS Spark ->
     INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL); the value is the checkpoint interval, not a
     latency: use "5 minutes".
  3. The stream-static join had no broadcast hint: whether it is planned as a broadcast-hash join depended
     on the size estimate of `accounts` vs spark.sql.autoBroadcastJoinThreshold. Real-time mode only runs a
     broadcast join (a sort-merge join with a shuffle of the stream is not in the allowlist), so broadcast
     the small static table explicitly.
  4. Filter before the join, so only large payments probe the lookup table; key cast to string explicitly.
Behaviour kept: amount > 1000, inner join (payments of unknown accounts are dropped, as before),
key = payment id, value = JSON with id, account, amount, owner.
"""

from pyspark.sql import functions as F

REALTIME_BATCH_DURATION = "5 minutes"


def enrich(events, accounts):
    large = events.where(F.col("amount") > 1000)
    joined = large.join(F.broadcast(accounts.select("account", "owner")), "account")
    return joined.select(F.col("id").cast("string").alias("key"),
                         F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"))


def start(events, accounts, bootstrap, topic, checkpoint):
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=REALTIME_BATCH_DURATION)
            .start())
