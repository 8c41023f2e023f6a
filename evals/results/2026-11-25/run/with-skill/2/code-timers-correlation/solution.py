"""Correlate orders with payments per order_id using PySpark transformWithState and processing-time timers.

Input ``events``: one stream with columns
    order_id STRING, kind STRING ('order' or 'payment')
(other columns are ignored). Build it from two streams with :func:`union_events`.

Output of :func:`correlate`: (order_id STRING, status STRING) with status
    'paid'   -- as soon as the payment of an open order arrives (or when the order
                arrives and its payment was already there);
    'unpaid' -- when ``timeout_ms`` (10 minutes) of processing time passed after the
                order arrived without a payment.
Each order window gives exactly one row. Duplicated orders or payments inside
the window are ignored. A payment that arrives before its order is kept for up
to ``timeout_ms`` and matched when the order comes; if no order comes it is
dropped silently (nothing to report for it). An event after a closed window
opens a new one.

Trigger on open-source Spark 4.3: MICRO-BATCH, e.g. ``trigger(processingTime="1 second")``.
Real-time mode does not run PySpark ``transformWithState`` in open-source Spark
(the query starts and then dies with STDS_FAILED_TO_READ_OPERATOR_METADATA; only
the JVM operator is supported there). With processing-time timers a micro-batch
runs every trigger even without new input, so 'unpaid' comes out at most about
one trigger after the 10 minutes. On Databricks Runtime 17.3 LTS+ the same
processor also runs under ``trigger(realTime="5 minutes")`` (handleInputRows is
then called per row; it is written to be correct either way). See answer.md.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

TIMEOUT_MS = 10 * 60 * 1000
PAID, UNPAID = "paid", "unpaid"

OUTPUT_SCHEMA = StructType([
    StructField("order_id", StringType()),
    StructField("status", StringType()),
])

# one state row per open order_id
_STATE_SCHEMA = "order_seen BOOLEAN, paid BOOLEAN, deadline_ms LONG"


class OrderPaymentMatcher(StatefulProcessor):
    """Per order_id: wait up to ``timeout_ms`` (processing time) after the order for its payment.

    Handles input one row at a time, so it behaves the same whether
    ``handleInputRows`` gets all of a key's rows of a micro-batch or (Databricks
    real-time mode) one row per call.
    """

    def __init__(self, timeout_ms: int = TIMEOUT_MS):
        self.timeout_ms = timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        # TTL only as a backstop in case a timer never fires; well past the window
        self.state = handle.getValueState("order_state", _STATE_SCHEMA, 4 * self.timeout_ms)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues) -> Iterator[Row]:
        order_id = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            kind = (row["kind"] or "").lower()
            if kind not in ("order", "payment"):
                continue  # unknown kind: not ours to correlate
            if self.state.exists() and now >= self.state.get()[2]:
                # window already over but its timer has not fired yet (in micro-batch the
                # batch's input is handled before its timers): close it first
                yield from self._close(order_id, delete_timer=True)
            if not self.state.exists():
                deadline = now + self.timeout_ms
                self.state.update((False, False, deadline))
                self.handle.registerTimer(deadline)
            order_seen, paid, deadline = self.state.get()
            if kind == "order":
                if order_seen:
                    continue  # duplicate order
                self.state.update((True, paid, deadline))
                if paid:  # the payment came first
                    yield Row(order_id=order_id, status=PAID)
            else:  # payment
                if paid:
                    continue  # duplicate payment
                self.state.update((order_seen, True, deadline))
                if order_seen:
                    yield Row(order_id=order_id, status=PAID)

    def handleExpiredTimer(self, key: Any, timerValues, expiredTimerInfo) -> Iterator[Row]:
        if self.state.exists() and self.state.get()[2] == expiredTimerInfo.getExpiryTimeInMs():
            yield from self._close(key[0], delete_timer=False)

    def _close(self, order_id: str, delete_timer: bool) -> Iterator[Row]:
        """End the window: report an unpaid order, then delete the key's state (and timer)."""
        order_seen, paid, deadline = self.state.get()
        if order_seen and not paid:
            yield Row(order_id=order_id, status=UNPAID)
        if delete_timer:
            self.handle.deleteTimer(deadline)
        self.state.clear()

    def close(self) -> None:
        pass


def correlate(events: DataFrame, timeout_ms: int = TIMEOUT_MS) -> DataFrame:
    """(order_id, status) per order: 'paid' when its payment arrives, 'unpaid' after the timeout."""
    return (events.select(F.col("order_id").cast("string").alias("order_id"),
                          F.col("kind").cast("string").alias("kind"))
            .where(F.col("order_id").isNotNull())
            .groupBy("order_id")
            .transformWithState(OrderPaymentMatcher(timeout_ms), OUTPUT_SCHEMA,
                                outputMode="Append", timeMode="ProcessingTime"))


def union_events(orders: DataFrame, payments: DataFrame) -> DataFrame:
    """Two streams (each with order_id) -> the one event shape correlate() takes."""
    return (orders.select("order_id", F.lit("order").alias("kind"))
            .unionByName(payments.select("order_id", F.lit("payment").alias("kind"))))


def start(events: DataFrame, writer: Any, checkpoint: str, trigger: str = "1 second") -> StreamingQuery:
    """Open-source Spark 4.3: micro-batch. ``writer``: an idempotent foreach writer
    (upsert on order_id; a replayed batch rewrites the same rows)."""
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger)
            .start())
