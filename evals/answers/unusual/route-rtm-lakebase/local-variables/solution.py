"""The writer built step by step in local variables; the mode spelled in capitals."""


def start(orders, writer, checkpoint):
    ws = orders.writeStream
    ws = ws.foreach(writer)
    ws = ws.outputMode("Update")
    ws = ws.option("checkpointLocation", checkpoint)
    interval = "10 seconds"
    return ws.trigger(realTime=interval).start()
