"""The fixed query: a helper returns the configured writer; the filter kept."""


def _writer(df, writer, checkpoint):
    return df.writeStream.foreach(writer).option("checkpointLocation", checkpoint).outputMode("update")


def start(events, writer, checkpoint):
    severe = events.filter(events["severity"] >= 3)
    settings = {"realTime": "5 seconds"}
    return _writer(severe, writer, checkpoint).trigger(**settings).start()
