"""Kafka -> Lakebase real-time upsert with Databricks' native Lakebase sink.

Which sink per runtime (answer.json):
  * open-source Spark 4.3   -> foreach writer: the Lakebase/Postgres streaming
    sink is a Databricks connector, it does not exist in Apache Spark.
  * DBR 16.4 LTS, 17.3 LTS  -> foreach writer: real-time mode exists there,
    but the native Lakebase streaming sink needs Databricks Runtime 18 or
    above (classic compute, dedicated or standard access mode).
  * DBR 19 on classic compute, upsert by key -> native sink
    (`format("postgresql")`): it upserts by `upsertkey` (default: the table's
    primary key), batches rows (batchsize / batchinterval), retries, and
    handles Lakebase auth, all in the JVM - no Python worker on the hot path.

start_native() is for that last runtime.
"""
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

# Lakebase table registered in Unity Catalog (catalog created when the
# Lakebase database is registered). Adjust to the real names.
TARGET_TABLE = "lakebase_catalog.public.orders"
# None -> the sink infers the upsert key from the table's primary key.
UPSERT_KEY = None
REAL_TIME_BATCH_DURATION = "5 minutes"  # checkpoint interval, not latency


def start_native(df: DataFrame, checkpoint: str) -> StreamingQuery:
    writer = (
        df.writeStream.format("postgresql")  # Databricks Lakebase streaming sink
        .outputMode("update")  # required by the sink and by real-time mode
        .option("checkpointLocation", checkpoint)
        # flush quickly: at most 100 ms (the default) or 1000 rows per transaction
        .option("batchinterval", "100 milliseconds")
        .option("batchsize", "1000")
        .trigger(realTime=REAL_TIME_BATCH_DURATION)
    )
    if UPSERT_KEY:
        writer = writer.option("upsertkey", UPSERT_KEY)
    return writer.toTable(TARGET_TABLE)
