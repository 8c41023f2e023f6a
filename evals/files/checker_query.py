"""A user's real-time query into Lakebase (input of the eval task checker-fix-query)."""


def start(events, writer, checkpoint):
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreachBatch(lambda df, epoch: writer.write_batch(df, epoch))
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="500 milliseconds")
            .start())
