"""Orders into Lakebase through an idempotent foreach writer in real-time mode (DBR 17.3 has no native sink)."""


def start(orders, writer, checkpoint):
    return (orders.writeStream
            .foreach(writer)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 minutes")
            .start())
