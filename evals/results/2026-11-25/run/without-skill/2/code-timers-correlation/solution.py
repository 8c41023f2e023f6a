"""Order/payment correlation with transformWithState and processing-time timers (PySpark 4.1+).

Input `events`: a streaming DataFrame with
    order_id   string
    event_type string   -- "order" or "payment"   (a column named `type` or `kind` is accepted too)
Output: (order_id string, status string) with status "paid" or "unpaid".

Behaviour per order_id:
  * order arrives              -> start a 10-minute processing-time timer;
  * payment arrives in time    -> emit (order_id, "paid") at once, cancel the timer;
  * timer fires, no payment    -> emit (order_id, "unpaid");
  * payment seen *before* its order (possible with independent producers) is remembered for
    10 minutes, so an order arriving within that window is reported "paid" immediately;
  * duplicates (re-sent order or payment after the outcome) are ignored for a while thanks to a
    "done" marker kept with a TTL.

Trigger on open-source Spark 4.3: a MICRO-BATCH processing-time trigger, e.g.
`.trigger(processingTime="1 second")` with output mode "update".  The Python transformWithState
operator is not in Spark 4.3's real-time-mode allowlist (only the JVM/Scala transformWithState is),
so trigger(realTime=...) is rejected; availableNow/once would stop the query before the 10-minute
timers could fire.  Processing-time timers fire in the first micro-batch after they expire (also in
no-data batches), so the "unpaid" output is late by at most about one trigger interval.
transformWithState also needs the RocksDB state store provider (and pyarrow on the workers).
"""

from typing import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

TIMEOUT_MS = 10 * 60 * 1000
DONE_TTL_MS = 2 * TIMEOUT_MS

OUTPUT_SCHEMA = "order_id string, status string"


def _key_value(key):
    return key[0] if isinstance(key, (tuple, list)) else key


class OrderPaymentMatcher(StatefulProcessor):
    """Per order_id: wait up to 10 minutes (processing time) for the payment."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        # deadline (ms) of the timer of an order that is waiting for its payment
        self.pending = handle.getValueState("pending", "deadline_ms long")
        # expiry (ms) of a payment that arrived before its order
        self.early_payment = handle.getValueState("early_payment", "expires_ms long")
        # outcome already emitted; kept for a while to swallow re-sent events for this order
        self.done = handle.getValueState("done", "status string", DONE_TTL_MS)

    def handleInputRows(self, key, rows: Iterator[Row], timerValues) -> Iterator[Row]:
        order_id = _key_value(key)
        saw_order = saw_payment = False
        for row in rows:
            kind = (row["event_type"] or "").strip().lower()
            if kind == "order":
                saw_order = True
            elif kind == "payment":
                saw_payment = True
        if self.done.exists():
            return  # outcome already emitted: duplicates / late re-sends are ignored
        now = timerValues.getCurrentProcessingTimeInMs()

        if self.pending.exists():                        # order waiting for its payment
            if saw_payment:
                self.handle.deleteTimer(self.pending.get()[0])
                self.pending.clear()
                self.done.update(("paid",))
                yield Row(order_id=order_id, status="paid")
            return                                       # a re-sent order keeps the original timer

        if saw_order:
            if saw_payment or self.early_payment.exists():
                if self.early_payment.exists():
                    self.handle.deleteTimer(self.early_payment.get()[0])
                    self.early_payment.clear()
                self.done.update(("paid",))
                yield Row(order_id=order_id, status="paid")
            else:
                deadline = now + TIMEOUT_MS
                self.handle.registerTimer(deadline)
                self.pending.update((deadline,))
        elif saw_payment and not self.early_payment.exists():
            expires = now + TIMEOUT_MS                    # payment before order: remember it
            self.handle.registerTimer(expires)
            self.early_payment.update((expires,))

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        order_id = _key_value(key)
        fired = expiredTimerInfo.getExpiryTimeInMs()
        if self.pending.exists() and self.pending.get()[0] == fired:
            self.pending.clear()
            self.done.update(("unpaid",))
            yield Row(order_id=order_id, status="unpaid")
        elif self.early_payment.exists() and self.early_payment.get()[0] == fired:
            self.early_payment.clear()                   # no order came: forget the payment

    def close(self) -> None:
        pass


def _normalise(events: DataFrame) -> DataFrame:
    cols = set(events.columns)
    for name in ("event_type", "type", "kind"):
        if name in cols:
            return events.select(F.col("order_id").cast("string").alias("order_id"),
                                 F.col(name).cast("string").alias("event_type"))
    raise ValueError("events needs an order_id column and an event_type (or type/kind) column "
                     "with values 'order' / 'payment'")


def correlate(events: DataFrame) -> DataFrame:
    """(order_id, status) stream: 'paid' when the payment arrives within 10 minutes, else 'unpaid'."""
    return (_normalise(events)
            .where(F.col("order_id").isNotNull())
            .groupBy("order_id")
            .transformWithState(
                statefulProcessor=OrderPaymentMatcher(),
                outputStructType=OUTPUT_SCHEMA,
                outputMode="Update",
                timeMode="ProcessingTime",
            ))


def configure(spark) -> None:
    """transformWithState requires the RocksDB state store provider."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")


def start(events: DataFrame, writer, checkpoint: str, interval: str = "1 second"):
    """Run on OSS Spark 4.3 with a micro-batch processing-time trigger (not real-time mode)."""
    configure(events.sparkSession)
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=interval)
            .start())
