"""Correlate orders with payments per order_id using PySpark ``transformWithState``.

When an order arrives, a processing-time timer is set 10 minutes ahead. A payment with the
same ``order_id`` inside that window emits ``(order_id, "paid")`` at once; if the timer fires
first, ``(order_id, "unpaid")`` is emitted. Every order gives exactly one outcome row.

Input ``events``: a streaming DataFrame with ``order_id`` and an event-kind column
(``event_type``, ``kind`` or ``type``) whose value is ``"order"`` or ``"payment"``
(assumption: both kinds come in one stream; union two streams first if they are separate,
see :func:`union_orders_payments`).

Edge cases handled:
- a payment that arrives *before* its order is remembered for 10 minutes; the order then
  emits ``paid`` immediately;
- duplicate orders / payments after the outcome are ignored until the key's window ends,
  then its state is cleared;
- a timer that is due but not yet fired when a new row arrives is honoured first (Databricks
  real-time mode fires timers only when a later row arrives).

Trigger: on open-source Spark 4.3, PySpark ``transformWithState`` is not supported in
real-time mode (the query dies), so run it as a **micro-batch** query with a processing-time
trigger (e.g. ``trigger(processingTime="1 second")``); with processing-time timers a batch runs
every trigger even without input, so ``unpaid`` is emitted at most about one trigger late.
On Databricks Runtime 17.3 LTS+ the same code can run with ``trigger(realTime="5 minutes")``.
State store: RocksDB (required by transformWithState), see :func:`configure`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import StringType, StructField, StructType

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

WINDOW_MS = 10 * 60 * 1000  # 10 minutes of processing time
PAID, UNPAID = "paid", "unpaid"

OUTPUT_SCHEMA = StructType([
    StructField("order_id", StringType(), False),
    StructField("status", StringType(), False),
])

_DEADLINE = "deadline_ms BIGINT"
_FLAG = "seen BOOLEAN"


class OrderPaymentMatcher(StatefulProcessor):
    """Per ``order_id``: an open order, a payment seen first, and a timer closing the window."""

    def __init__(self, window_ms: int = WINDOW_MS):
        self.window_ms = window_ms

    def init(self, handle) -> None:
        self.handle = handle
        # TTL as a back-up only (timers normally clear the state); well past the window.
        ttl = 4 * self.window_ms
        self.order = handle.getValueState("order_open", _FLAG, ttl)      # order waiting for payment
        self.payment = handle.getValueState("payment_first", _FLAG, ttl)  # payment waiting for order
        self.resolved = handle.getValueState("resolved", _FLAG, ttl)     # outcome already emitted
        self.deadline = handle.getValueState("deadline", _DEADLINE, ttl)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        order_id = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            if self.deadline.exists() and now >= self.deadline.get()[0]:
                yield from self._expire(order_id, delete_timer=True)  # due, not yet fired
            kind = (row.kind or "").lower()
            if kind == "order":
                yield from self._on_order(order_id, now)
            elif kind == "payment":
                yield from self._on_payment(order_id, now)
            # other kinds: ignored

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        if self.deadline.exists() and self.deadline.get()[0] == expiredTimerInfo.getExpiryTimeInMs():
            yield from self._expire(key[0], delete_timer=False)

    # -- events --------------------------------------------------------------------
    def _on_order(self, order_id: str, now: int) -> Iterator[Row]:
        if self.resolved.exists() or self.order.exists():
            return  # duplicate order: its outcome is (or will be) emitted once
        if self.payment.exists():  # the payment came first
            self.payment.clear()
            self.resolved.update((True,))
            yield Row(order_id=order_id, status=PAID)
            return
        self.order.update((True,))
        self._start_window(now)

    def _on_payment(self, order_id: str, now: int) -> Iterator[Row]:
        if self.resolved.exists() or self.payment.exists():
            return  # duplicate payment
        if self.order.exists():
            self.order.clear()
            self.resolved.update((True,))
            yield Row(order_id=order_id, status=PAID)
            return
        self.payment.update((True,))  # wait (up to the window) for its order
        self._start_window(now)

    def _start_window(self, now: int) -> None:
        if not self.deadline.exists():
            deadline = now + self.window_ms
            self.deadline.update((deadline,))
            self.handle.registerTimer(deadline)

    def _expire(self, order_id: str, delete_timer: bool) -> Iterator[Row]:
        if self.order.exists() and not self.resolved.exists():
            yield Row(order_id=order_id, status=UNPAID)
        if delete_timer:
            self.handle.deleteTimer(self.deadline.get()[0])
        self.order.clear()
        self.payment.clear()
        self.resolved.clear()
        self.deadline.clear()

    def close(self) -> None:
        pass


def _kind_column(events: DataFrame):
    for name in ("event_type", "kind", "type"):
        if name in events.columns:
            return F.col(name).cast("string")
    raise ValueError("events needs an event-kind column (event_type, kind or type) "
                     "with values 'order' / 'payment'")


def correlate(events: DataFrame, window_ms: int = WINDOW_MS) -> DataFrame:
    """(order_id, status) rows: 'paid' when the payment arrives, 'unpaid' after the window."""
    keyed = events.select(F.col("order_id").cast("string").alias("order_id"),
                          _kind_column(events).alias("kind"))
    return (keyed.groupBy("order_id")
            .transformWithState(OrderPaymentMatcher(window_ms), OUTPUT_SCHEMA,
                                outputMode="Append", timeMode="ProcessingTime"))


def union_orders_payments(orders: DataFrame, payments: DataFrame) -> DataFrame:
    """Two separate streams (each with ``order_id``) as the one-stream input of :func:`correlate`."""
    return (orders.select(F.col("order_id").cast("string"), F.lit("order").alias("event_type"))
            .unionByName(payments.select(F.col("order_id").cast("string"),
                                         F.lit("payment").alias("event_type"))))


def configure(spark: SparkSession) -> None:
    """transformWithState needs the RocksDB state store (changelog checkpointing recommended)."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")


def start(events: DataFrame, writer, checkpoint: str, trigger: str = "1 second") -> StreamingQuery:
    """Open-source Spark 4.3: micro-batch (PySpark transformWithState is not allowed in
    real-time mode there). ``writer`` should upsert on order_id (at-least-once delivery)."""
    configure(events.sparkSession)
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger)
            .start())
