"""Trigger values read from settings objects and helper returns (the corrected shapes)."""

from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class StreamSettings:
    checkpoint: str
    interval: str = "2 seconds"


class Limits(NamedTuple):
    interval: str = "1 minute"


def trigger_options(real_time):
    if real_time:
        return {"realTime": "5 minutes"}
    return {"processingTime": "0 seconds"}


def run(events, writer):
    settings = StreamSettings("/tmp/cp-orders", interval="30 seconds")
    (events.writeStream.foreach(writer).outputMode("update")
     .option("checkpointLocation", settings.checkpoint)
     .trigger(realTime=settings.interval).start())
    events.writeStream.foreach(writer).outputMode("update").trigger(**trigger_options(True)).start()
    events.writeStream.foreach(writer).outputMode("update").trigger(realTime=Limits().interval).start()
