"""The native Lakebase streaming sink for the runtime where it applies: Databricks Runtime 19, classic compute.

Which sink per runtime (answer.json):
- open-source Spark 4.3: ``foreach`` -- ``format("postgresql")`` is a Databricks data
  source and does not exist in Apache Spark. (For milliseconds there, start the
  writer through a JVM path rather than stock Python foreach.)
- Databricks Runtime 16.4 LTS and 17.3 LTS: ``foreach`` -- both run real-time mode,
  but the native sink needs Databricks Runtime 18 LTS or above (older page
  versions: 18.3+, Public Preview).
- Databricks Runtime 19, classic compute, upsert on the table's primary key:
  ``native`` -- the runtime has the sink, classic compute in dedicated or
  standard access mode is supported, and a plain upsert on the key is exactly
  what the sink does (``upsertkey``). No writer code, workspace identity for
  authentication, built-in batching and retries.

Real-time mode on the cluster still needs: classic compute (dedicated access
mode, or standard for Python), Photon/autoscaling/spot off and
``spark.databricks.streaming.realTimeMode.enabled true`` in the cluster config.
Delivery is at-least-once (the unfinished long batch is replayed after a
failure): the upsert on the primary key makes the replay harmless, so the
table must have one and ``upsertkey`` must match it.
"""

from __future__ import annotations

import os

# Where to write: set these for your workspace (or pass them to start_native).
LAKEBASE_ENDPOINT = os.environ.get("LAKEBASE_ENDPOINT", "<project>.<branch>.<endpoint>")
LAKEBASE_DATABASE = os.environ.get("LAKEBASE_DATABASE", "databricks_postgres")
LAKEBASE_TABLE = os.environ.get("LAKEBASE_TABLE", "public.orders")   # "schema.table"
UPSERT_KEY = os.environ.get("LAKEBASE_UPSERT_KEY", "id")             # must match the primary key


def start_native(df, checkpoint: str, *, endpoint: str = LAKEBASE_ENDPOINT, dbtable: str = LAKEBASE_TABLE,
                 upsertkey: str = UPSERT_KEY, database: str = LAKEBASE_DATABASE):
    """Upsert ``df`` into a Lakebase table by its primary key with the native sink, in real-time mode.

    Databricks Runtime 18 LTS+ (here: Runtime 19, classic compute). ``df`` is the
    parsed Kafka stream with the table's columns.
    """
    return (df.writeStream
            .format("postgresql")
            .outputMode("update")                         # real-time mode accepts update only
            .option("endpoint", endpoint)                 # "<project>.<branch>.<endpoint>"
            .option("database", database)
            .option("dbtable", dbtable)                   # "schema.table"
            .option("upsertkey", upsertkey)               # comma-separated; = the primary key
            .option("batchsize", "1000")                  # rows per transaction (default)
            .option("batchinterval", "100 milliseconds")  # Spark interval string ("100 ms" is rejected)
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")                # checkpoint interval, not latency
            .start())


def start_native_uc(df, checkpoint: str, uc_table: str):
    """Same sink for a table of a Lakebase database registered in Unity Catalog
    (``catalog.schema.table``); the upsert key is taken from the table's primary key."""
    return (df.writeStream
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")
            .toTable(uc_table))
