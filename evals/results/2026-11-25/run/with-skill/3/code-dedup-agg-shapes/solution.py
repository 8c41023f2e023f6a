"""Distinct events per user in real time: one query on open-source Spark 4.3, two queries on Databricks.

Events are (event_id, user); a re-sent event keeps its event_id and must count once.

- Open-source Spark 4.3 runs a deduplication feeding an aggregation in ONE
  real-time query (two streaming shuffles): :func:`oss_unique_counts`.
- Databricks rejects that plan in real-time mode (SHUFFLE_MORE_THAN_ONCE /
  STREAMING_REAL_TIME_WATERMARK_PROPAGATION: one shuffle, one stateful operator
  per real-time query). Split it at a Kafka topic: query 1
  :func:`databricks_dedup` writes first copies to the topic, query 2 reads the
  topic and runs :func:`databricks_counts`. The topic hop is at-least-once,
  see answer.md and :func:`start_counts_to_postgres` for keeping counts exact.

No stateful operator here uses a watermark (the events carry no event time),
so the deduplication state keeps every event_id ever seen: size the state
store for the lifetime id count, or deduplicate in Postgres instead.
All queries: ``outputMode("update")``, ``trigger(realTime="<duration>")``.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

HOP_SCHEMA = "event_id STRING, user STRING"


# -- open-source Spark 4.3: one real-time query ------------------------------------------
def oss_unique_counts(events: DataFrame) -> DataFrame:
    """(user, count) of distinct event_ids, in one real-time query (open-source Spark 4.3 only).

    Two shuffles: slots = source tasks + 2 x spark.sql.shuffle.partitions.
    Each input row that is a first copy emits one updated (user, count) row.
    """
    return events.dropDuplicates(["event_id"]).groupBy("user").count()


# -- Databricks: two real-time queries joined by a Kafka topic ---------------------------
def databricks_dedup(events: DataFrame) -> DataFrame:
    """Query 1: the first copy of each event_id (one shuffle, one stateful operator)."""
    return events.dropDuplicates(["event_id"]).select("event_id", "user")


def databricks_counts(deduped: DataFrame) -> DataFrame:
    """Query 2: (user, count) over the deduplicated stream (one shuffle, one stateful operator)."""
    return deduped.groupBy("user").count()


def to_hop_records(deduped: DataFrame) -> DataFrame:
    """Query 1's rows as Kafka records: key = event_id (replays land in the same partition), JSON value."""
    return deduped.select(F.col("event_id").cast("string").alias("key"),
                          F.to_json(F.struct("event_id", "user")).alias("value"))


def from_hop_records(kafka_df: DataFrame) -> DataFrame:
    """Query 2's input: the hop topic's records parsed back to (event_id, user)."""
    parsed = F.from_json(F.col("value").cast("string"), HOP_SCHEMA)
    return kafka_df.select(parsed.alias("e")).select("e.event_id", "e.user")


def start_dedup_to_kafka(events: DataFrame, bootstrap: str, hop_topic: str, checkpoint: str,
                         trigger: str = "5 minutes") -> StreamingQuery:
    """Databricks query 1: deduplicate and publish first copies to ``hop_topic``."""
    return (to_hop_records(databricks_dedup(events)).writeStream
            .format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", hop_topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=trigger)
            .start())


def start_counts(spark: Any, bootstrap: str, hop_topic: str, writer: Any, checkpoint: str,
                 trigger: str = "5 minutes") -> StreamingQuery:
    """Databricks query 2: count per user from the hop topic into an idempotent ``foreach`` writer.

    Upsert on ``user`` with ``count`` as the version column (a count only grows),
    so replayed updates of this query are harmless. The hop itself can still
    republish ids after a crash of query 1: for exact counts use
    :func:`start_counts_to_postgres` instead.
    """
    hop = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", hop_topic)
           .load())
    return (databricks_counts(from_hop_records(hop)).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())


def start_counts_to_postgres(spark: Any, bootstrap: str, hop_topic: str, writer: Any, checkpoint: str,
                             trigger: str = "5 minutes") -> StreamingQuery:
    """Exact alternative for query 2: write each (event_id, user) once, insert-if-absent, count in SQL.

    ``writer`` inserts with ``ON CONFLICT (event_id) DO NOTHING`` (e.g. the pack's
    ``PostgresForeachWriter`` with ``SinkSettings(mode="insert_ignore")``), so an id
    republished by the at-least-once hop finds its row already there; the count is
    ``SELECT "user", count(*) FROM events GROUP BY "user"`` (a view). No Spark state.
    """
    hop = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", hop_topic)
           .load())
    return (from_hop_records(hop).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
