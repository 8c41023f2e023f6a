"""Databricks' native Lakebase streaming sink in real-time mode (plain upsert on the primary key).

Intervals need a full unit: "100 milliseconds". An abbreviation such as "100ms" or '250 ms' fails at start
with INVALID_INTERVAL_FORMAT.INVALID_UNIT, so none is used below.
"""


def start_native(df, checkpoint):
    # not "100ms": the sink rejects abbreviated units
    return (df.writeStream
            .format("postgresql")
            .option("endpoint", "my-project.production")
            .option("dbtable", "public.orders")
            .option("batchinterval", "100 milliseconds")
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
