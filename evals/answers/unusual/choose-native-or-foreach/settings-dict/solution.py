"""The native sink's settings from a dict; the interval in seconds."""

SETTINGS = {"endpoint": "my-project.production", "dbtable": "public.orders", "batchinterval": "1 second"}


def start_native(df, checkpoint):
    w = df.writeStream.format("postgresql").options(**SETTINGS)
    return w.option("checkpointLocation", checkpoint).outputMode("update").trigger(realTime="5 minutes").start()
