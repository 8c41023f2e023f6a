"""Kafka pipeline patterns for real-time mode, split into testable transformations and option dicts.

Each pattern is a function from a DataFrame shaped like Kafka's source
schema (``key``, ``value``, ``topic``, ``partition``, ``offset``,
``timestamp``; ``key``/``value`` may be BINARY as Kafka delivers them or
STRING) to the DataFrame you hand to a sink. The Kafka reader and writer
settings are built as plain dicts by :func:`kafka_source_options` and
:func:`kafka_sink_options`, so the same code runs against a real broker
(``spark.readStream.format("kafka").options(**opts).load()``) and, in the
pack's tests, against the in-memory RTM source of ``pack_lab/rtm_lab.py``.

Patterns:

- :func:`large_payments` - parse, filter, project and re-key into a Kafka
  ``key``/``value`` record (RTM);
- :func:`enrich_with_accounts` - broadcast stream-static join (RTM);
- :func:`validate_payments` + :func:`route_by_topic` - validation with a
  dead-letter topic chosen per row, in ONE query, no ``foreachBatch`` (RTM);
- :func:`make_batch_router` - the ``foreachBatch`` variant for micro-batch
  only (real-time mode rejects ``foreachBatch`` at ``start()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame

#: The payload every pattern reads from the Kafka ``value`` (JSON).
PAYMENT_SCHEMA = "payment_id STRING, account_id STRING, amount DOUBLE, currency STRING, event_ms BIGINT"

#: Kafka's source columns that identify a record; kept for dead letters and tracing.
KAFKA_COORDINATES = ("topic", "partition", "offset")


# --8<-- [start:parse]
def parse_payments(kafka_df: DataFrame, keep_raw: bool = False) -> DataFrame:
    """Kafka records → one column per payment field, plus the record's coordinates.

    ``keep_raw`` also keeps the original value text as ``raw_value`` (for dead letters).
    """
    from pyspark.sql import functions as F

    payment = F.from_json(F.col("value").cast("string"), PAYMENT_SCHEMA)
    raw = [F.col("value").cast("string").alias("raw_value")] if keep_raw else []
    return kafka_df.select(
        F.col("key").cast("string").alias("kafka_key"), *raw, payment.alias("p"),
        "topic", "partition", "offset", "timestamp",
    ).select("kafka_key", *(["raw_value"] if keep_raw else []), "p.*",
             "topic", "partition", "offset", "timestamp")
# --8<-- [end:parse]


# --8<-- [start:to_kafka]
def to_kafka_record(df: DataFrame, key_column: str, value_columns: list[str]) -> DataFrame:
    """Shape rows for the Kafka sink: ``key`` and a JSON ``value`` (both STRING)."""
    from pyspark.sql import functions as F

    return df.select(
        F.col(key_column).cast("string").alias("key"),
        F.to_json(F.struct(*value_columns)).alias("value"),
    )
# --8<-- [end:to_kafka]


# --8<-- [start:large_payments]
def large_payments(kafka_df: DataFrame, min_amount: float = 1000.0) -> DataFrame:
    """Pattern 1 (RTM): keep payments of at least ``min_amount``, keyed by account."""
    from pyspark.sql import functions as F

    payments = parse_payments(kafka_df)
    large = payments.where(F.col("amount") >= F.lit(min_amount))
    return to_kafka_record(large, "account_id",
                           ["payment_id", "account_id", "amount", "currency", "event_ms"])
# --8<-- [end:large_payments]


# --8<-- [start:enrich]
def enrich_with_accounts(kafka_df: DataFrame, accounts: DataFrame) -> DataFrame:
    """Pattern 2 (RTM): add account attributes with a broadcast stream-static join.

    ``accounts`` is a small static DataFrame with an ``account_id`` column. The
    ``broadcast`` hint matters: real-time mode allows a stream-static join only
    when it needs no shuffle. A left join keeps payments of unknown accounts.
    """
    from pyspark.sql import functions as F

    payments = parse_payments(kafka_df)
    enriched = payments.join(F.broadcast(accounts), "account_id", "left")
    value_columns = ["payment_id", "account_id", "amount", "currency"] + [
        c for c in accounts.columns if c != "account_id"]
    return to_kafka_record(enriched, "account_id", value_columns)
# --8<-- [end:enrich]


# --8<-- [start:validate]
def validate_payments(kafka_df: DataFrame) -> DataFrame:
    """Parse and add ``error``: NULL for a valid payment, else the first reason it fails."""
    from pyspark.sql import functions as F

    payments = parse_payments(kafka_df, keep_raw=True)
    error = (
        F.when(F.col("payment_id").isNull(), F.lit("unparsable or missing payment_id"))
        .when(F.col("amount").isNull(), F.lit("missing amount"))
        .when(F.col("amount") <= 0, F.lit("amount must be positive"))
        .when(~F.col("currency").rlike("^[A-Z]{3}$"), F.lit("currency must be 3 capital letters"))
    )
    return payments.withColumn("error", error)
# --8<-- [end:validate]


# --8<-- [start:route]
def route_by_topic(validated: DataFrame, good_topic: str, dead_letter_topic: str) -> DataFrame:
    """Pattern 3 (RTM): one query, the target topic chosen per row.

    The Kafka sink sends each row to the topic in its ``topic`` column when the
    writer has no ``topic`` option. Valid payments go to ``good_topic``; invalid
    ones go to ``dead_letter_topic`` with the reason, the untouched input value
    and where it came from, so they can be inspected and replayed.
    """
    from pyspark.sql import functions as F

    is_valid = F.col("error").isNull()
    good_value = F.to_json(F.struct("payment_id", "account_id", "amount", "currency", "event_ms"))
    dead_value = F.to_json(F.struct(
        "error", "raw_value",
        F.col("topic").alias("source_topic"), F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset")))
    return validated.select(
        F.when(is_valid, F.lit(good_topic)).otherwise(F.lit(dead_letter_topic)).alias("topic"),
        F.coalesce(F.col("account_id"), F.col("kafka_key")).cast("string").alias("key"),
        F.when(is_valid, good_value).otherwise(dead_value).alias("value"),
    )
# --8<-- [end:route]


# --8<-- [start:batch_router]
def make_batch_router(write_good: Callable[[DataFrame, int], None],
                      write_dead: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
    """Pattern 4 (micro-batch ONLY): a ``foreachBatch`` function writing two outputs per batch.

    Use it when each batch needs several batch writes (two tables, a MERGE,
    a Kafka topic and a table). Real-time mode rejects ``foreachBatch`` at
    ``start()``; in RTM use :func:`route_by_topic` or one query per sink.
    """
    def route(batch_df: DataFrame, batch_id: int) -> None:
        validated = validate_payments(batch_df).persist()
        try:
            write_good(validated.where("error IS NULL").drop("error", "raw_value"), batch_id)
            write_dead(validated.where("error IS NOT NULL"), batch_id)
        finally:
            validated.unpersist()
    return route
# --8<-- [end:batch_router]


# --8<-- [start:source_options]
def kafka_source_options(bootstrap_servers: str, topics: str, *, starting_offsets: str = "latest",
                         fail_on_data_loss: bool = True, real_time: bool = True,
                         max_partitions: int | None = None,
                         max_offsets_per_trigger: int | None = None,
                         security: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka").options(**opts)``.

    ``maxOffsetsPerTrigger`` is a micro-batch read limit; no RTM documentation
    says what it does to a real-time batch (which is bounded by its duration),
    so this helper refuses it when ``real_time`` is set. ``maxPartitions`` is
    a Databricks option (several Kafka partitions per task). ``security``
    holds ``kafka.``-prefixed client settings.
    """
    if real_time and max_offsets_per_trigger is not None:
        raise ValueError("maxOffsetsPerTrigger is a micro-batch read limit; "
                         "do not rely on it in real-time mode")
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": topics,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": str(fail_on_data_loss).lower(),
    }
    if max_partitions is not None:
        options["maxPartitions"] = str(max_partitions)
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    for key, value in (security or {}).items():
        if not key.startswith("kafka."):
            raise ValueError(f"Kafka client settings take the 'kafka.' prefix: {key!r}")
        options[key] = value
    return options
# --8<-- [end:source_options]


# --8<-- [start:sink_options]
def kafka_sink_options(bootstrap_servers: str, checkpoint_location: str, *,
                       topic: str | None = None,
                       security: Mapping[str, str] | None = None) -> dict[str, str]:
    """Options for ``df.writeStream.format("kafka").options(**opts)``.

    Leave ``topic`` unset to route per row by a ``topic`` column
    (:func:`route_by_topic`); set it to send every row to one topic.
    """
    options = {"kafka.bootstrap.servers": bootstrap_servers,
               "checkpointLocation": checkpoint_location}
    if topic is not None:
        options["topic"] = topic
    for key, value in (security or {}).items():
        if not key.startswith("kafka."):
            raise ValueError(f"Kafka client settings take the 'kafka.' prefix: {key!r}")
        options[key] = value
    return options
# --8<-- [end:sink_options]


def sasl_ssl_settings(username: str, password: str, mechanism: str = "PLAIN") -> dict[str, str]:
    """``kafka.``-prefixed SASL_SSL client settings (pass a secret, never a literal password)."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    escaped_user = username.replace("\\", "\\\\").replace('"', '\\"')
    escaped_password = password.replace("\\", "\\\\").replace('"', '\\"')
    return {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": mechanism,
        "kafka.sasl.jaas.config":
            f'{module} required username="{escaped_user}" password="{escaped_password}";',
    }


# --8<-- [start:wire]
def start_large_payments_to_kafka(spark: Any, bootstrap_servers: str, source_topic: str,
                                  target_topic: str, checkpoint_location: str,
                                  trigger: str = "5 minutes") -> Any:
    """Wire pattern 1 to real Kafka (needs the spark-sql-kafka connector on the classpath)."""
    source = (spark.readStream.format("kafka")
              .options(**kafka_source_options(bootstrap_servers, source_topic)).load())
    return (large_payments(source).writeStream.format("kafka")
            .options(**kafka_sink_options(bootstrap_servers, checkpoint_location,
                                          topic=target_topic))
            .outputMode("update")
            .trigger(realTime=trigger)
            .start())
# --8<-- [end:wire]
