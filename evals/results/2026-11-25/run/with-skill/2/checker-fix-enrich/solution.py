"""A user's enrichment query, fixed so the pack's checker reports nothing.

Checker findings on the original (python3 -m rtm_lakebase.check checker_enrich.py):
- RTM009 join without broadcast() on the static side: real-time mode runs a
  stream-static join only when the static side is broadcast (a shuffle join is
  rejected with STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST)
  -> ``events.join(F.broadcast(accounts), "account")``. Keep ``accounts`` small.
- RTM002 realTime="2 seconds" is under the 5-second minimum -> ``"5 minutes"``:
  the duration is the checkpoint interval, not a latency; the Kafka sink
  publishes each row as it is processed whatever the duration.
- RTM004 no output mode (append by default) -> ``.outputMode("update")``.

Behaviour kept: payments with amount > 1000, inner join (payments of unknown
accounts are dropped, as before), key = payment id, value = JSON with id,
account, amount, owner. The filter now runs before the join (same result,
fewer lookups) and the key is cast to string for the Kafka sink.
Delivery to Kafka is at-least-once (consumers dedupe by key).
"""

from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery


def enrich(events, accounts):
    large = events.where(F.col("amount") > 1000)
    joined = large.join(F.broadcast(accounts), "account")
    return joined.select(F.col("id").cast("string").alias("key"),
                         F.to_json(F.struct("id", "account", "amount", "owner")).alias("value"))


def start(events, accounts, bootstrap, topic, checkpoint) -> StreamingQuery:
    return (enrich(events, accounts).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
