"""Databricks job: orders from Kafka upserted into Lakebase in real-time mode (entry point: main)."""

import argparse

import psycopg
from psycopg import sql
from pyspark.sql import SparkSession, functions as F


class OrdersWriter:
    """Foreach writer: one connection per partition, upsert by key, errors propagate."""

    def __init__(self, dsn: str, table: str):
        self.dsn, self.table = dsn, table
        self.conn = None

    def open(self, partition_id, epoch_id):
        self.conn = psycopg.connect(self.dsn, autocommit=True)  # a failure raises: Spark retries the task
        return True

    def process(self, row):
        stmt = sql.SQL("INSERT INTO {} (id, amount) VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount").format(
            sql.Identifier(self.table))
        self.conn.execute(stmt, (row["id"], row["amount"]))

    def close(self, error):
        if self.conn is not None:
            self.conn.close()
        if error is not None:
            raise error


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    spark = SparkSession.builder.getOrCreate()
    orders = (spark.readStream.format("kafka").option("subscribe", "orders").load()
              .select(F.from_json(F.col("value").cast("string"), "id STRING, amount DOUBLE").alias("o")).select("o.*"))
    (orders.writeStream
     .foreach(OrdersWriter(args.dsn, "orders"))
     .option("checkpointLocation", args.checkpoint)
     .outputMode("update")
     .trigger(realTime="5 minutes")
     .start()
     .awaitTermination())


if __name__ == "__main__":
    main()
