"""Order/payment correlation with PySpark transformWithState + processing-time timers.

Input `events`: one stream carrying both kinds of events, keyed by `order_id`,
with a discriminator column (`event_type`, or `type` / `kind` / `event`)
whose value is "order" or "payment".  Output: (order_id, status) with status
"paid" or "unpaid", exactly one row per order.

Trigger on open-source Spark 4.3: a micro-batch processing-time trigger, e.g.
    .trigger(processingTime="1 second")
- not real-time mode: in Spark 4.3 real-time mode only runs the JVM
  (Scala/Java) transformWithState operator; the Python one
  (TransformWithStateInPySparkExec) is not on the real-time allowlist.
- not availableNow/once: the query stops, so a 10-minute timer would never
  get a batch in which to fire.
- with timeMode="ProcessingTime" the operator asks for a batch even when no
  data arrives (so "unpaid" is emitted without new input); an explicit
  interval keeps these no-data batches from running back to back. A timer
  fires in the first batch after its deadline, i.e. at most one interval late.
See answer.md.
"""
from typing import Any, Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import BooleanType, LongType, StructField, StructType

WAIT_MS = 10 * 60 * 1000  # 10 minutes of processing time

OUTPUT_SCHEMA = "order_id string, status string"

# pending order: when its 10-minute timer expires
ORDER_STATE = StructType([StructField("expires_at_ms", LongType(), False)])
# payment seen before its order (out of order arrival), with a cleanup timer
PAYMENT_STATE = StructType(
    [StructField("seen", BooleanType(), False), StructField("expires_at_ms", LongType(), False)]
)

DISCRIMINATOR_CANDIDATES = ("event_type", "type", "kind", "event")


class OrderPaymentMatcher(StatefulProcessor):
    """Per order_id: on an order, wait WAIT_MS for a payment.

    * payment while the order waits  -> emit (order_id, "paid"), drop the timer
    * timer fires with no payment    -> emit (order_id, "unpaid")
    * payment before the order       -> remembered; the order is then paid at
      once. The remembered payment is dropped after WAIT_MS if no order comes.
    * duplicate order while waiting  -> ignored (the first deadline stands)
    * events after the outcome       -> state was cleared, so a new order event
      for the same id starts a new wait (re-sent orders after the outcome are
      the caller's business; keep a "done" marker if that must be suppressed)
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending_order = handle.getValueState("pending_order", ORDER_STATE)
        self.early_payment = handle.getValueState("early_payment", PAYMENT_STATE)

    # -- helpers ---------------------------------------------------------
    @staticmethod
    def _kind(row: Row) -> str:
        value = row["event_type"]
        return "" if value is None else str(value).strip().lower()

    def _clear_order(self) -> None:
        if self.pending_order.exists():
            (expires_at,) = self.pending_order.get()
            self.handle.deleteTimer(expires_at)
            self.pending_order.clear()

    def _clear_payment(self) -> None:
        if self.early_payment.exists():
            _, expires_at = self.early_payment.get()
            self.handle.deleteTimer(expires_at)
            self.early_payment.clear()

    # -- callbacks -------------------------------------------------------
    def handleInputRows(
        self, key: Any, rows: Iterator[Row], timerValues: TimerValues
    ) -> Iterator[Row]:
        order_id = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        saw_order = saw_payment = False
        for row in rows:
            kind = self._kind(row)
            if kind == "order":
                saw_order = True
            elif kind == "payment":
                saw_payment = True
            # other kinds are ignored

        order_waiting = self.pending_order.exists()
        payment_known = saw_payment or self.early_payment.exists()

        if order_waiting or saw_order:
            if payment_known:
                self._clear_order()
                self._clear_payment()
                yield Row(order_id=order_id, status="paid")
            elif not order_waiting:
                expires_at = now + WAIT_MS
                self.handle.registerTimer(expires_at)
                self.pending_order.update((expires_at,))
            # else: duplicate order while waiting - keep the first deadline
        elif saw_payment and not self.early_payment.exists():
            # payment arrived first: remember it for WAIT_MS
            expires_at = now + WAIT_MS
            self.handle.registerTimer(expires_at)
            self.early_payment.update((True, expires_at))

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        order_id = key[0]
        fired = expiredTimerInfo.getExpiryTimeInMs()
        if self.pending_order.exists() and self.pending_order.get()[0] == fired:
            self.pending_order.clear()
            yield Row(order_id=order_id, status="unpaid")
        if self.early_payment.exists() and self.early_payment.get()[1] == fired:
            self.early_payment.clear()  # orphan payment: forget it, no output

    def close(self) -> None:
        pass


def _discriminator(events: DataFrame) -> str:
    for name in DISCRIMINATOR_CANDIDATES:
        if name in events.columns:
            return name
    raise ValueError(
        f"events needs order_id and one of {DISCRIMINATOR_CANDIDATES} "
        f"('order' / 'payment'); got columns {events.columns}"
    )


def correlate(events: DataFrame) -> DataFrame:
    """(order_id, status) stream; run it with trigger(processingTime=...)."""
    kind_col = _discriminator(events)
    normalized = events.select(
        F.col("order_id").cast("string").alias("order_id"),
        F.col(kind_col).cast("string").alias("event_type"),
    ).where(F.col("order_id").isNotNull())
    return normalized.groupBy("order_id").transformWithState(
        statefulProcessor=OrderPaymentMatcher(),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",  # each order produces exactly one final row
        timeMode="ProcessingTime",
    )


def start(events: DataFrame, writer, checkpoint: str, interval: str = "1 second"):
    """Example wiring for open-source Spark 4.3 (micro-batch, processing-time trigger)."""
    return (
        correlate(events)
        .writeStream.foreach(writer)
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=interval)
        .start()
    )
