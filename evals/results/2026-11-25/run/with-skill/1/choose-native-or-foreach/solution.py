"""Databricks' native Lakebase streaming sink (``format("postgresql")``) from a real-time query.

Applies on Databricks Runtime 18 LTS and above (older copies of the page: 18.3+, Public
Preview), classic compute in dedicated or standard access mode, when a plain upsert on the
table's primary key is all the table needs -- here: Databricks Runtime 19 on classic compute.
Open-source Spark 4.3, DBR 16.4 LTS and DBR 17.3 LTS have no such sink: use a ``foreach``
writer there (e.g. ``rtm_lakebase.sink.PostgresForeachWriter``).

Cluster: ``spark.databricks.streaming.realTimeMode.enabled`` = true, Photon/autoscaling/spot off.
The sink authenticates as the user / service principal running the query (no password here).
Delivery after a failure replays the unfinished long batch; the upsert on the primary key makes
that harmless, so the target table must have a primary key.

Target: set ``LAKEBASE_ENDPOINT`` (``<project>.<branch>.<endpoint>``), ``LAKEBASE_TABLE``
(``schema.table``) and optionally ``LAKEBASE_DATABASE`` / ``LAKEBASE_UPSERT_KEY``, or pass them
as keyword arguments.
"""

from __future__ import annotations

import os

TRIGGER = "5 minutes"  # the checkpoint interval of the real-time query, not a latency target


def start_native(df, checkpoint, *, endpoint=None, table=None, database=None, upsertkey=None):
    """Upsert ``df`` into a Lakebase table with the native streaming sink, in real-time mode."""
    endpoint = endpoint or os.environ.get("LAKEBASE_ENDPOINT")
    table = table or os.environ.get("LAKEBASE_TABLE")
    database = database or os.environ.get("LAKEBASE_DATABASE", "databricks_postgres")
    upsertkey = upsertkey or os.environ.get("LAKEBASE_UPSERT_KEY")  # None: the table's primary key
    if not endpoint or not table:
        raise ValueError("give the Lakebase endpoint ('<project>.<branch>.<endpoint>') and the table "
                         "('schema.table'), as arguments or LAKEBASE_ENDPOINT / LAKEBASE_TABLE")
    writer = (df.writeStream
              .format("postgresql")
              .outputMode("update")                       # the only mode real-time mode runs
              .option("endpoint", endpoint)
              .option("database", database)
              .option("dbtable", table)
              .option("batchsize", "1000")                # rows per transaction (default)
              .option("batchinterval", "100 milliseconds")  # a Spark interval; "100 ms" is rejected
              .option("checkpointLocation", checkpoint))
    if upsertkey:
        writer = writer.option("upsertkey", upsertkey)    # must match the table's primary key
    return writer.trigger(realTime=TRIGGER).start()
