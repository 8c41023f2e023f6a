"""Kafka → real-time mode → Lakebase: upsert each payment by id, newest event wins.

A complete job a user can start with ``spark-submit`` (with the Kafka
connector and this package shipped to the executors, see the sink reference;
use your Spark's connector release: Maven Central has none for 4.3.0, see
"The connector" in references/kafka-streaming.md):

    PG_DSN='host=... dbname=... user=... sslmode=require' \\
    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:$SPARK_VERSION \\
        --py-files rtm_lakebase.zip,examples.zip examples/kafka_to_lakebase_upsert.py \\
        --bootstrap-servers broker:9092 --topic payments --checkpoint /chk/payments

The target table needs a primary key on ``payment_id``:

    CREATE TABLE payments (payment_id text PRIMARY KEY, account_id text,
                           amount double precision, currency text, event_ms bigint);

``payments_for_upsert`` is the query's only logic; the tests run it on the
lab's in-memory real-time source and check the table it fills.
"""

from __future__ import annotations

import argparse
import os
import sys

from examples.kafka_patterns import kafka_source_options, parse_payments
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

COLUMNS = ("payment_id", "account_id", "amount", "currency", "event_ms")


def payments_for_upsert(kafka_df):
    """Kafka records → one row per valid payment, with the columns of the target table."""
    return parse_payments(kafka_df).where("payment_id IS NOT NULL").select(*COLUMNS)


def payments_writer(dsn: str, table: str = "payments") -> PostgresForeachWriter:
    """Upsert keyed by payment_id; a replayed or older event (smaller event_ms) never wins."""
    return PostgresForeachWriter(dsn, SinkSettings(table=table, key_columns=("payment_id",),
                                                   version_column="event_ms"))


def start(spark, bootstrap_servers: str, topic: str, dsn: str, checkpoint: str, table: str = "payments"):
    """Start the real-time query; returns the StreamingQuery."""
    kafka = spark.readStream.format("kafka").options(**kafka_source_options(bootstrap_servers, topic)).load()
    return (payments_for_upsert(kafka).writeStream.foreach(payments_writer(dsn, table))
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 seconds")  # the OSS minimum; use minutes in production (see the trigger reference)
            .start())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--table", default="payments")
    args = parser.parse_args(argv)
    dsn = os.environ.get("PG_DSN")
    if not dsn:
        print("kafka_to_lakebase_upsert: error: set PG_DSN to the target database's connection string",
              file=sys.stderr)
        return 2
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("kafka-to-lakebase-upsert").getOrCreate()
    start(spark, args.bootstrap_servers, args.topic, dsn, args.checkpoint, args.table).awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
