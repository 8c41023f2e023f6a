"""Databricks' native Lakebase streaming sink from a real-time query (Databricks Runtime 19, classic compute).

Which sink, per runtime (Kafka -> Lakebase, real-time mode, upsert on the primary key):

- open-source Spark 4.3: ``foreach`` writer. ``format("postgresql")`` is a
  Databricks data source; open-source Spark has no such sink. (For milliseconds
  on open-source Spark, run the writer through the pack's fast foreach path or
  use its JVM sink: stock Python ``foreach`` delivers rows seconds late there.)
- Databricks Runtime 16.4 LTS and 17.3 LTS: ``foreach`` writer. The native
  sink needs Databricks Runtime 18 LTS or above (older page versions: 18.3+,
  Public Preview); ``foreachBatch`` is rejected in real-time mode.
- Databricks Runtime 19 on classic compute (dedicated or standard access mode),
  plain upsert on the table's primary key: the native sink, below. No writer
  code to own; it batches, retries and authenticates as the identity running
  the query. Use the ``foreach`` writer instead only when the table needs more
  than a key upsert (a version guard, insert-if-absent, COPY appends, own metrics).

Options are exactly the documented set (anything else fails with
JDBC_STREAMING_SINK_INVALID_OPTIONS): endpoint, database, dbtable, upsertkey,
batchsize, batchinterval, checkpointLocation. ``batchinterval`` is a Spark
interval with the unit spelled out ("100 milliseconds"; "100 ms" fails with
INVALID_INTERVAL_FORMAT.INVALID_UNIT).

Delivery is at-least-once: after a failure the unfinished long batch is
replayed and written again; the upsert on the primary key makes that harmless.
The cluster also needs real-time mode enabled
(``spark.databricks.streaming.realTimeMode.enabled true`` in the cluster's
Spark config; Photon, autoscaling and spot off).
"""

from __future__ import annotations

import os

#: Lakebase compute endpoint, "<project>.<branch>.<endpoint>"; set LAKEBASE_ENDPOINT or pass endpoint=.
LAKEBASE_ENDPOINT = os.environ.get("LAKEBASE_ENDPOINT", "my-project.production.primary")
#: Target table as "schema.table"; it must have a primary key matching UPSERT_KEY.
LAKEBASE_TABLE = os.environ.get("LAKEBASE_TABLE", "public.orders")
UPSERT_KEY = os.environ.get("LAKEBASE_UPSERT_KEY", "id")
LAKEBASE_DATABASE = os.environ.get("LAKEBASE_DATABASE", "databricks_postgres")


def start_native(df, checkpoint: str, endpoint: str = LAKEBASE_ENDPOINT, table: str = LAKEBASE_TABLE,
                 key: str = UPSERT_KEY, database: str = LAKEBASE_DATABASE):
    """Upsert ``df`` into a Lakebase table with the native sink, in real-time mode; returns the StreamingQuery."""
    return (df.writeStream
            .format("postgresql")
            .outputMode("update")                         # the only output mode real-time mode accepts
            .option("endpoint", endpoint)                 # "<project>.<branch>.<endpoint>"
            .option("database", database)
            .option("dbtable", table)                     # "schema.table"
            .option("upsertkey", key)                     # must match the table's primary key
            .option("batchsize", "1000")                  # rows per transaction (the default)
            .option("batchinterval", "100 milliseconds")  # the default; unit spelled out
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")                # checkpoint interval, not a latency target
            .start())
