"""Databricks job: orders from Kafka into Lakebase (known-wrong: swallows errors, builds SQL with f-strings)."""

import psycopg
from pyspark.sql import SparkSession, functions as F


class OrdersWriter:
    def __init__(self, dsn, table):
        self.dsn, self.table = dsn, table

    def open(self, partition_id, epoch_id):
        try:
            self.conn = psycopg.connect(self.dsn)
        except Exception:
            return False
        return True

    def process(self, row):
        self.conn.execute(f"INSERT INTO {self.table} VALUES ('{row['id']}', {row['amount']})")

    def close(self, error):
        self.conn.close()


def write_batch(batch_df, batch_id):
    batch_df.write.format("jdbc").save()


def main():
    spark = SparkSession.builder.getOrCreate()
    orders = (spark.readStream.format("kafka").option("subscribe", "orders").load()
              .select(F.from_json(F.col("value").cast("string"), "id STRING, amount DOUBLE").alias("o")).select("o.*"))
    deduped = orders.withWatermark("ts", "10 minutes").dropDuplicatesWithinWatermark(["id"])
    (deduped.writeStream
     .foreachBatch(write_batch)
     .trigger(realTime=True)
     .start())


if __name__ == "__main__":
    main()
