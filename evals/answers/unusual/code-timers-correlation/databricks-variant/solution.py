"""Orders matched with payments within 10 minutes of processing time, with transformWithStateInPandas."""

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

OUTPUT = "order_id STRING, status STRING"
WAIT_MS = 10 * 60 * 1000


class OrderPaymentMatcher(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.deadline = handle.getValueState("deadline", "ms LONG")

    def handleInputRows(self, key, rows, timerValues):
        order_id = key[0]
        for batch in rows:
            for kind in batch["kind"]:
                if kind == "order" and not self.deadline.exists():
                    due = timerValues.getCurrentProcessingTimeInMs() + WAIT_MS
                    self.handle.registerTimer(due)
                    self.deadline.update((due,))
                elif kind == "payment" and self.deadline.exists():
                    self.handle.deleteTimer(self.deadline.get()[0])
                    self.deadline.clear()
                    yield pd.DataFrame({"order_id": [order_id], "status": ["paid"]})

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.deadline.clear()
        yield pd.DataFrame({"order_id": [key[0]], "status": ["unpaid"]})

    def close(self) -> None:
        pass


def correlate(events):
    """events: order_id, kind ('order' or 'payment'). Run with a processingTime (micro-batch) trigger."""
    return events.groupBy("order_id").transformWithStateInPandas(
        statefulProcessor=OrderPaymentMatcher(), outputStructType=OUTPUT,
        outputMode="Update", timeMode="ProcessingTime")


def start_real_time_databricks(events, writer, checkpoint):
    """Databricks Runtime 17.3 LTS and above only: the same query in real-time mode (open-source 4.3 refuses it)."""
    return (correlate(events).writeStream.foreach(writer).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(realTime="5 minutes").start())
