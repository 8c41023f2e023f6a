"""The broken query fixed: foreach(writer), update mode, a real-time trigger of at least 5 seconds."""


def start(events, writer, checkpoint):
    return (events.where("severity >= 3")
            .writeStream
            .foreachBatch(writer)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime="5 seconds")
            .start())
