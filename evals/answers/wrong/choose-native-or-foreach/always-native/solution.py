"""Databricks' native Lakebase streaming sink in real-time mode (plain upsert on the primary key)."""


def start_native(df, checkpoint):
    return (df.writeStream
            .format("postgresql")
            .option("endpoint", "my-project.production")
            .option("dbtable", "public.orders")
            .option("batchinterval", "100 milliseconds")
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
