"""Orders matched with their payments within 10 minutes of processing time, with PySpark ``transformWithState``.

Input: one stream ``events`` with ``order_id`` and an event kind column
(``kind``, or ``type`` / ``event_type``) whose value is ``"order"`` or
``"payment"`` (matched case-insensitively by prefix: "order…", "pay…"). Two
source streams are first unioned into that shape (see :func:`union_events`).

Output, one row per order: ``(order_id, "paid")`` as soon as the payment is
seen, or ``(order_id, "unpaid")`` when 10 minutes pass after the order without
one. Rules, per ``order_id``:

- the order opens a 10-minute processing-time window and registers a timer at
  its end; a payment inside the window emits ``paid`` at once;
- a payment that arrives *before* its order is remembered for 10 minutes, so
  the order then emits ``paid`` at once (streams are not ordered);
- a repeated order or payment inside the window is ignored (one row per order);
- when the timer fires, an order still waiting emits ``unpaid``; then all
  state of the key is deleted (a payment that never got an order leaves
  silently);
- a row arriving after its window ended opens a new window.

The processor handles one row at a time and keeps everything in state, so it
behaves the same whether ``handleInputRows`` gets all of a key's rows of a
micro-batch or, as in Databricks real-time mode, one row per call. It checks
an overdue window before each row, because in a micro-batch the input is
handled before the timers.

Which trigger (see answer.md): on open-source Spark 4.3 a PySpark
``transformWithState`` does not run in real-time mode (the query dies with
STDS_FAILED_TO_READ_OPERATOR_METADATA), so run it in micro-batch
(:func:`start`, ``trigger(processingTime=...)``); with processing-time timers
a micro-batch runs every trigger even without input, so ``unpaid`` comes out
at most about one trigger interval after the 10 minutes. On Databricks Runtime
17.3 LTS and above the same query runs with ``trigger(realTime="5 minutes")``
(:func:`start_real_time_databricks`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery

TIMEOUT_MS = 10 * 60 * 1000
PAID, UNPAID = "paid", "unpaid"
OUTPUT_SCHEMA = "order_id STRING, status STRING"

# State per order_id: what has been seen and when the window ends.
#   phase "awaiting_payment": the order is waiting for its payment
#   phase "payment_first":    a payment came before its order
#   phase "paid":             matched and reported; swallows repeats until the window ends
_STATE_SCHEMA = "phase STRING, deadline_ms LONG"
AWAITING, PAYMENT_FIRST, MATCHED = "awaiting_payment", "payment_first", "paid"
_KIND_COLUMNS = ("kind", "type", "event_type", "event")


class OrderPaymentMatcher(StatefulProcessor):
    """Per ``order_id``: wait ``timeout_ms`` (processing time) after the order for a payment."""

    def __init__(self, timeout_ms: int = TIMEOUT_MS, ttl_ms: int | None = None):
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be a positive integer, got {timeout_ms!r}")
        self.timeout_ms = timeout_ms
        # TTL only backs up the timer (state of a key whose timer never fires still leaves);
        # keep it well past the window, or it would delete a waiting order unreported.
        self.ttl_ms = ttl_ms if ttl_ms is not None else 4 * timeout_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.window = handle.getValueState("window", _STATE_SCHEMA, self.ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues) -> Iterator[Row]:
        order_id = key[0]
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            state = self.window.get() if self.window.exists() else None
            if state is not None and now >= state[1]:
                # The window is over but its timer has not fired yet: close it first.
                yield from self._close(order_id, state, delete_timer=True)
                state = None
            kind = _kind(row)
            if kind == "order":
                yield from self._on_order(order_id, state, now)
            elif kind == "payment":
                yield from self._on_payment(order_id, state, now)
            # any other kind is not part of the correlation and is ignored

    def handleExpiredTimer(self, key: Any, timerValues, expiredTimerInfo) -> Iterator[Row]:
        if not self.window.exists():
            return
        state = self.window.get()
        if state[1] == expiredTimerInfo.getExpiryTimeInMs():
            yield from self._close(key[0], state, delete_timer=False)

    def close(self) -> None:
        pass

    # -- one row ------------------------------------------------------------------
    def _open(self, phase: str, now: int) -> None:
        deadline = now + self.timeout_ms
        self.window.update((phase, deadline))
        self.handle.registerTimer(deadline)

    def _on_order(self, order_id: str, state: tuple | None, now: int) -> Iterator[Row]:
        if state is None:
            self._open(AWAITING, now)
        elif state[0] == PAYMENT_FIRST:
            self.window.update((MATCHED, state[1]))  # keep the timer: it ends the window
            yield Row(order_id=order_id, status=PAID)
        # AWAITING or MATCHED: a repeated order, already waiting or reported

    def _on_payment(self, order_id: str, state: tuple | None, now: int) -> Iterator[Row]:
        if state is None:
            self._open(PAYMENT_FIRST, now)
        elif state[0] == AWAITING:
            self.window.update((MATCHED, state[1]))
            yield Row(order_id=order_id, status=PAID)
        # PAYMENT_FIRST or MATCHED: a repeated payment

    def _close(self, order_id: str, state: tuple, delete_timer: bool) -> Iterator[Row]:
        """End the window: an order still waiting is reported unpaid; then the key's state goes."""
        if state[0] == AWAITING:
            yield Row(order_id=order_id, status=UNPAID)
        if delete_timer:
            self.handle.deleteTimer(state[1])
        self.window.clear()


def _kind(row: Row) -> str | None:
    value = row["kind"]
    if value is None:
        return None
    text = str(value).strip().lower()
    if text.startswith("order"):
        return "order"
    if text.startswith("pay"):
        return "payment"
    return None


def _kind_column(events: DataFrame) -> str:
    for name in _KIND_COLUMNS:
        if name in events.columns:
            return name
    raise ValueError(f"events needs order_id and a kind column (one of {_KIND_COLUMNS}) holding "
                     f"'order' or 'payment'; got columns {events.columns}")


def union_events(orders: DataFrame, payments: DataFrame) -> DataFrame:
    """Two source streams (each with ``order_id``) as the one event shape :func:`correlate` takes."""
    return (orders.select(F.col("order_id").cast("string"), F.lit("order").alias("kind"))
            .unionByName(payments.select(F.col("order_id").cast("string"), F.lit("payment").alias("kind"))))


def correlate(events: DataFrame, timeout_ms: int = TIMEOUT_MS) -> DataFrame:
    """(order_id, status) rows: "paid" when the payment arrives, "unpaid" when ``timeout_ms`` pass first."""
    shaped = events.select(F.col("order_id").cast("string").alias("order_id"),
                           F.col(_kind_column(events)).cast("string").alias("kind"))
    return (shaped.groupBy("order_id")
            .transformWithState(OrderPaymentMatcher(timeout_ms), OUTPUT_SCHEMA,
                                outputMode="Append", timeMode="ProcessingTime"))


# -- starting it ------------------------------------------------------------------------
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def start(events: DataFrame, writer: Any, checkpoint: str, trigger: str = "1 second") -> StreamingQuery:
    """Open-source Spark 4.3: micro-batch (PySpark ``transformWithState`` is not supported in real-time mode).

    ``transformWithState`` needs the RocksDB state store. The output rows are
    final (one per order), keyed by ``order_id``: write them with an idempotent
    writer (upsert on order_id), since a replayed batch writes them again.
    """
    spark = events.sparkSession
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=trigger)
            .start())


def start_real_time_databricks(events: DataFrame, writer: Any, checkpoint: str,
                               trigger: str = "5 minutes") -> StreamingQuery:
    """Databricks Runtime 17.3 LTS+ (real-time mode enabled on the cluster): the same query in real-time mode.

    Timers are checked after each input row and when the long batch ends, so an
    idle key's "unpaid" comes at the latest one trigger duration after its
    window closed. Open-source Spark 4.3 stops this query with an error.
    """
    return (correlate(events).writeStream
            .foreach(writer)
            .outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=trigger)
            .start())
