"""Native Lakebase streaming sink (Databricks Runtime 19, classic compute) for a real-time query.

Which sink per runtime (see answer.json):
  * open-source Spark 4.3   -> foreach writer (there is no Lakebase/Postgres streaming sink in OSS;
                                real-time sinks are Kafka, foreach, console, memory).
  * DBR 16.4 LTS, 17.3 LTS  -> foreach writer (the native Lakebase sink needs DBR 18 and above).
  * DBR 19, classic compute -> native sink: format("postgresql") with upsertkey = the table's primary
                                key; it does batching, retries and workspace-managed auth itself.

Real-time mode requirements that still apply: classic compute (dedicated or standard access mode),
spark.databricks.streaming.realTimeMode.enabled=true, autoscaling and Photon off, output mode
"update", trigger(realTime=...).

Option values that are intervals must be spelled with a full unit, e.g. "100 milliseconds"
(an abbreviation such as "100ms" fails with INVALID_INTERVAL_FORMAT.INVALID_UNIT).
"""

import os

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

# Where to write: Lakebase endpoint "<project-id>.<branch-id>.<endpoint-id>", database, schema.table.
# Defaults come from the environment so the interface stays start_native(df, checkpoint).
LAKEBASE_ENDPOINT = os.environ.get("LAKEBASE_ENDPOINT", "<project-id>.<branch-id>.<endpoint-id>")
LAKEBASE_DATABASE = os.environ.get("LAKEBASE_DATABASE", "databricks_postgres")
LAKEBASE_TABLE = os.environ.get("LAKEBASE_TABLE", "public.orders")
UPSERT_KEY = os.environ.get("LAKEBASE_UPSERT_KEY", "id")          # the table's primary key column(s)


def start_native(df: DataFrame, checkpoint: str, *, endpoint: str = None, database: str = None,
                 table: str = None, upsert_key: str = None,
                 batch_interval: str = "100 milliseconds", batch_size: int = 1000,
                 trigger: str = "5 minutes") -> StreamingQuery:
    """Real-time upsert of `df` into a Lakebase table by primary key with the native sink."""
    return (df.writeStream
            .format("postgresql")
            .outputMode("update")
            .option("endpoint", endpoint or LAKEBASE_ENDPOINT)
            .option("database", database or LAKEBASE_DATABASE)
            .option("dbtable", table or LAKEBASE_TABLE)
            .option("upsertkey", upsert_key or UPSERT_KEY)
            .option("batchinterval", batch_interval)   # max time a row waits in the sink buffer
            .option("batchsize", str(batch_size))      # max rows per database transaction
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
