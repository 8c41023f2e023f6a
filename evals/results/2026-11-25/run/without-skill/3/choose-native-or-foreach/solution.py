"""Kafka -> Lakebase real-time upsert with Databricks' native Lakebase streaming sink.

Which sink per runtime (answer.json):
  * open-source Spark 4.3   -> foreach writer (the `postgresql` streaming sink is a Databricks connector)
  * DBR 16.4 LTS, 17.3 LTS  -> foreach writer (real-time mode exists, but the native Lakebase sink needs DBR 18+)
  * DBR 19, classic compute -> native sink: writeStream.format("postgresql"), upsert on the primary key
    (merge strategies / upsert options are fully available from DBR 19; classic compute supports real-time mode)

start_native() is for that last runtime. The sink upserts with INSERT ... ON CONFLICT on the upsert key;
when `upsertkey` is omitted it is inferred from the table's PRIMARY KEY (if given, it must equal the PK).
It batches (batchsize / batchinterval, default 100 ms - write intervals with a full unit, e.g.
"10 milliseconds"), retries transient JDBC errors, and authenticates as the query's identity.
Cluster: classic compute, Photon/autoscaling off, spark.databricks.streaming.realTimeMode.enabled=true.
"""

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

# Unity Catalog name of the Lakebase table (catalog registered for the Lakebase database).
LAKEBASE_TABLE = "lakebase_catalog.public.orders"
REALTIME_BATCH_DURATION = "5 minutes"


def start_native(df: DataFrame, checkpoint: str, table: str = LAKEBASE_TABLE, upsert_key: str = None,
                 endpoint: str = None, database: str = None,
                 batch_interval: str = None) -> StreamingQuery:
    """Upsert `df` into Lakebase by the table's primary key with the native sink, in real-time mode.

    table     : UC name catalog.schema.table (default form), or schema.table when `endpoint` is given
    endpoint  : "<project-id>.<branch-id>[.<endpoint-id>]" for a table not registered in Unity Catalog
    upsert_key: comma-separated PK columns; None = inferred from the table's primary key
    """
    w = (df.writeStream
         .format("postgresql")
         .outputMode("update")                      # real-time mode: update only (upsert semantics)
         .option("checkpointLocation", checkpoint)
         .trigger(realTime=REALTIME_BATCH_DURATION))
    if upsert_key:
        w = w.option("upsertkey", upsert_key)
    if batch_interval:
        w = w.option("batchinterval", batch_interval)
    if endpoint:
        w = w.option("endpoint", endpoint).option("dbtable", table)
        if database:
            w = w.option("database", database)      # default databricks_postgres
        return w.start()
    return w.toTable(table)
