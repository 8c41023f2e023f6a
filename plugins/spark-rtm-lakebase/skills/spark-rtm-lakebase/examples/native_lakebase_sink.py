"""Databricks' native Lakebase streaming sink from a real-time query: both documented forms.

Runs on Databricks only (the ``postgresql`` streaming data source is not part
of Apache Spark); nothing here was run by this pack, which has no Databricks
workspace. The tests import this module and check every option it sets
against the sink's documented option set (``scripts/skills.py check``).

Sources, read 2026-11-25 ("Connect to Lakebase", Structured Streaming):
the newest copy, learn.microsoft.com/en-us/Azure/databricks/structured-streaming/lakebase
(Databricks Runtime 18 LTS and above; external PostgreSQL, interval types
and merge strategies from Runtime 19), and the older docs.databricks.com copy
(Public Preview, Runtime 18.3 or above, classic compute only).

- :func:`start_endpoint_sink`: a Lakebase table that is not registered in
  Unity Catalog, addressed by ``endpoint`` (``<project>.<branch>.<endpoint>``)
  and ``dbtable`` (``schema.table``); ``database`` defaults to
  ``databricks_postgres``; ``upsertkey`` defaults to the primary key.
- :func:`start_unity_catalog_sink`: a table in a Lakebase database registered
  in Unity Catalog, written with ``.toTable("catalog.schema.table")``; the
  connector creates the table if it is missing and takes the upsert key from
  the primary key unless ``upsertkey`` is given.
- :func:`require_runtime`: the gate for the routes that need a newer runtime
  (an external Postgres through a Unity Catalog connection needs Runtime 19
  and the Custom JDBC on UC Compute preview).

Either way the sink authenticates as the user or service principal running
the query, batches rows (``batchsize`` rows per transaction, at most
``batchinterval`` of buffering) and retries on its own. Delivery after a
failure follows Structured Streaming: the unfinished long batch is replayed
and its rows are written again, and the upsert on the key is what makes that
harmless; so always write to a table with a primary key.
"""

from __future__ import annotations

import os

#: Lakebase sink options as documented (any other option fails with JDBC_STREAMING_SINK_INVALID_OPTIONS).
DOCUMENTED_OPTIONS = ("endpoint", "database", "dbtable", "upsertkey", "batchsize", "batchinterval",
                      "checkpointLocation")


# --8<-- [start:endpoint_sink]
def start_endpoint_sink(df, endpoint: str, table: str, key: str, checkpoint: str,
                        database: str = "databricks_postgres"):
    """Upsert ``df`` into a Lakebase table that is not registered in Unity Catalog."""
    return (df.writeStream
            .format("postgresql")
            .outputMode("update")
            .option("endpoint", endpoint)              # "<project>.<branch>.<endpoint>"
            .option("database", database)
            .option("dbtable", table)                  # "schema.table"
            .option("upsertkey", key)                  # must match the table's primary key
            .option("batchsize", "1000")               # rows per transaction (the default)
            .option("batchinterval", "100 milliseconds")  # a Spark interval: "100 ms" is rejected
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 minutes")             # the checkpoint interval, not a latency
            .start())
# --8<-- [end:endpoint_sink]


# --8<-- [start:unity_catalog_sink]
def start_unity_catalog_sink(df, uc_table: str, checkpoint: str):
    """Upsert ``df`` into ``catalog.schema.table`` of a Lakebase database registered in Unity Catalog."""
    return (df.writeStream
            .outputMode("update")
            .option("checkpointLocation", checkpoint)   # e.g. a path under /Volumes/...
            .trigger(realTime="5 minutes")
            .toTable(uc_table))                         # upsert key: the table's primary key
# --8<-- [end:unity_catalog_sink]


def runtime_version(environ=os.environ) -> tuple[int, int] | None:
    """(major, minor) of the Databricks Runtime from ``DATABRICKS_RUNTIME_VERSION``; None off Databricks."""
    raw = environ.get("DATABRICKS_RUNTIME_VERSION", "")
    parts = raw.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except ValueError:
        return None


def require_runtime(minimum: tuple[int, int], what: str, environ=os.environ) -> None:
    """Raise ``RuntimeError`` naming ``what`` unless this is Databricks Runtime ``minimum`` or later."""
    found = runtime_version(environ)
    if found is None:
        raise RuntimeError(f"{what} needs Databricks Runtime {minimum[0]}.{minimum[1]} or later; "
                           "this is not a Databricks cluster (DATABRICKS_RUNTIME_VERSION unset)")
    if found < minimum:
        raise RuntimeError(f"{what} needs Databricks Runtime {minimum[0]}.{minimum[1]} or later, "
                           f"this cluster runs {found[0]}.{found[1]}")
