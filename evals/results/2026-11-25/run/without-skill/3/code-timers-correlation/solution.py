"""Order/payment correlation with transformWithState and processing-time timers (PySpark).

Input  `events`: one stream with `order_id` and an event-kind column (`event_type`, `type`, `kind` or
                 `event`) whose value is "order" or "payment" (case-insensitive).
Output          : (order_id, status) with status 'paid' when the payment arrives within 10 minutes
                  (processing time) of the order, 'unpaid' when the 10 minutes pass without one.

Trigger on open-source Spark 4.3: a micro-batch processing-time trigger, e.g.
trigger(processingTime="1 second") (see start() and answer.md) - not trigger(realTime=...).
transformWithState also needs the RocksDB state store provider.
"""

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import StringType, StructField, StructType

TIMEOUT_MS = 10 * 60 * 1000
# How long an order id is remembered after its decision (swallows duplicate/late events), and how long
# an early payment (payment before its order) waits for the order.
RESOLVED_TTL_MS = 24 * 60 * 60 * 1000
EARLY_PAYMENT_TTL_MS = 24 * 60 * 60 * 1000

OUTPUT_SCHEMA = StructType([StructField("order_id", StringType()), StructField("status", StringType())])
KIND_COLUMNS = ("event_type", "type", "kind", "event")
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class OrderPaymentMatcher(StatefulProcessor):
    """Keyed by order_id. State per key:
       deadline  - expiry (ms) of the pending order's timer; exists while we wait for the payment
       early     - a payment arrived before its order
       resolved  - the status already emitted (paid/unpaid); later events for the id are ignored

    Works both when handleInputRows gets all of a key's rows of a micro-batch at once and when it gets
    one row per call (real-time mode), and whatever the order of order/payment inside a batch.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.deadline = handle.getValueState("deadline", "expiry_ms LONG")
        self.early = handle.getValueState("early_payment", "seen BOOLEAN", EARLY_PAYMENT_TTL_MS)
        self.resolved = handle.getValueState("resolved", "status STRING", RESOLVED_TTL_MS)

    def _decide(self, order_id, status):
        self.resolved.update((status,))
        self.deadline.clear()
        self.early.clear()
        return Row(order_id=order_id, status=status)

    def handleInputRows(self, key, rows, timerValues):
        order_id = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            if self.resolved.exists():
                continue                                   # already decided: duplicates / late events
            kind = (row["kind"] or "").strip().lower()
            if kind == "order":
                if self.deadline.exists():
                    continue                               # duplicate order, keep the first deadline
                if self.early.exists():
                    yield self._decide(order_id, "paid")   # payment came first
                else:
                    expiry = now + TIMEOUT_MS
                    self.handle.registerTimer(expiry)
                    self.deadline.update((expiry,))
            elif kind == "payment":
                if self.deadline.exists():
                    self.handle.deleteTimer(self.deadline.get()[0])
                    yield self._decide(order_id, "paid")
                else:
                    self.early.update((True,))             # remember it until the order shows up
            # any other kind is not part of this correlation and is ignored

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        if self.deadline.exists() and not self.resolved.exists():
            yield self._decide(key[0], "unpaid")

    def close(self) -> None:
        pass


def _kind_column(events: DataFrame) -> str:
    for c in KIND_COLUMNS:
        if c in events.columns:
            return c
    raise ValueError(f"events needs one of the columns {KIND_COLUMNS} ('order'/'payment'), got {events.columns}")


def correlate(events: DataFrame) -> DataFrame:
    """(order_id, status) stream: 'paid' or, 10 minutes after an unpaid order, 'unpaid'."""
    spark = events.sparkSession
    # transformWithState only runs on the RocksDB state store (set before the query first starts)
    if spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") != ROCKSDB_PROVIDER:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    slim = events.select(F.col("order_id").cast("string").alias("order_id"),
                         F.col(_kind_column(events)).cast("string").alias("kind"))
    return (slim.groupBy("order_id")
            .transformWithState(OrderPaymentMatcher(), OUTPUT_SCHEMA, "Append", "ProcessingTime"))


def start(events: DataFrame, writer, checkpoint: str, trigger_interval: str = "1 second"):
    """Run it on open-source Spark 4.3: micro-batch with a processing-time trigger.

    Timers fire in the micro-batch that runs after their expiry; with no input Spark still runs
    "no-data" batches for expired timers (spark.sql.streaming.noDataMicroBatches.enabled, default true),
    so an 'unpaid' is emitted 10 minutes + at most ~one trigger interval after the order.
    """
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("append")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger_interval)
            .start())
