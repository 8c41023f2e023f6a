"""checker_query.py fixed: foreach(writer), update mode, a real-time trigger of at least 5 seconds."""


def start(events, writer, checkpoint):
    severe = events.where("severity >= 3")
    return (severe.writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime="5 seconds")
            .start())
