"""Trigger values read from settings objects and helper returns (known-wrong shapes)."""

from dataclasses import dataclass
from typing import NamedTuple


@dataclass
class StreamSettings:
    checkpoint: str
    interval: str = "2 seconds"


class Limits(NamedTuple):
    interval: str = "1 second"


def trigger_options(real_time):
    if real_time:
        return {"realTime": real_time}
    return {"processingTime": "0 seconds"}


def run(events, writer):
    settings = StreamSettings("/tmp/cp-orders")
    (events.writeStream.foreach(writer).outputMode("update")
     .option("checkpointLocation", settings.checkpoint)
     .trigger(realTime=settings.interval).start())
    events.writeStream.foreach(writer).outputMode("update").trigger(**trigger_options(True)).start()
    events.writeStream.foreach(writer).outputMode("update").trigger(realTime=Limits().interval).start()
