"""Ad attribution: match ad requests with their acks (impressions) per transaction, with a timeout.

Two streams share a ``transaction_id`` (one viewing session's ad slot):
requests (``transaction_id, request_id, ad_id, event_ms``) and acks
(``transaction_id, ack_id, event_ms``). :func:`attribute` unions them and
runs :class:`AttributionProcessor` with ``transformWithState``. Per
transaction, the first event opens an attribution window of ``window_ms``
(processing time); until it closes:

- the request is kept in a value state, acks in a list state (an ack may
  come before its request; the list also recognises duplicate acks);
- each distinct ack matched with the request gives one ``matched`` row with
  the request-to-ack latency (``ack event_ms - request event_ms``);
- when the window closes, a request that got no ack gives one
  ``unmatched_request`` row, each ack that got no request one
  ``unmatched_ack`` row, and the transaction's state is deleted.

An event arriving after its window closed opens a new window. The pair key
``(transaction_id, request_id, ack_id)`` (``""`` for the missing side) is the
table's primary key, so replays after a failure upsert the same rows.

Where it runs: micro-batch in open-source Spark 4.3 (PySpark
``transformWithState`` is not allowed in real-time mode there); real-time
mode on Databricks, where ``handleInputRows`` gets one row per call and a
timer fires only when a later row arrives. The processor is written row by
row so the same code serves both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import LongType, StringType, StructField, StructType

if TYPE_CHECKING:  # pragma: no cover - typing only
    import psycopg
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery

    from rtm_lakebase.postgres import ConnectionSettings
    from rtm_lakebase.sink import PostgresForeachWriter

REQUEST_SCHEMA_DDL = "transaction_id STRING, request_id STRING, ad_id STRING, event_ms BIGINT"
ACK_SCHEMA_DDL = "transaction_id STRING, ack_id STRING, event_ms BIGINT"

MATCHED, UNMATCHED_REQUEST, UNMATCHED_ACK = "matched", "unmatched_request", "unmatched_ack"
#: The output's (and the table's) key: one row per request/ack pair or unmatched event.
PAIR_KEY = ("transaction_id", "request_id", "ack_id")

# --8<-- [start:schemas]
ATTRIBUTION_SCHEMA = StructType([
    StructField("transaction_id", StringType(), False),
    StructField("request_id", StringType(), False),   # "" for an unmatched ack
    StructField("ack_id", StringType(), False),       # "" for an unmatched request
    StructField("outcome", StringType(), False),      # matched | unmatched_request | unmatched_ack
    StructField("ad_id", StringType()),
    StructField("request_ms", LongType()),
    StructField("ack_ms", LongType()),
    StructField("latency_ms", LongType()),            # ack_ms - request_ms, for matched rows
])

_REQUEST_STATE = "request_id STRING, ad_id STRING, event_ms BIGINT"
_ACK_STATE = "ack_id STRING, event_ms BIGINT"
_DEADLINE_STATE = "deadline_ms BIGINT"
# --8<-- [end:schemas]


# --8<-- [start:processor]
class AttributionProcessor(StatefulProcessor):
    """Per ``transaction_id``: a request, its acks, and a timer that closes the window.

    Handles its input one row at a time, so it behaves the same whether
    ``handleInputRows`` gets all of a key's rows of a micro-batch or, as in
    Databricks real-time mode, one row per call.
    """

    def __init__(self, window_ms: int = 5 * 60_000, ttl_ms: int | None = None):
        self.window_ms = window_ms
        # TTL only backs the timer up (a key whose timer never fires still leaves
        # state); it must be well past the window, or it deletes state unreported.
        self.ttl_ms = ttl_ms if ttl_ms is not None else 4 * window_ms

    def init(self, handle) -> None:
        self.handle = handle
        self.request = handle.getValueState("request", _REQUEST_STATE, self.ttl_ms)
        self.acks = handle.getListState("acks", _ACK_STATE, self.ttl_ms)
        self.deadline = handle.getValueState("deadline", _DEADLINE_STATE, self.ttl_ms)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        now = timerValues.getCurrentProcessingTimeInMs()
        for row in rows:
            if self.deadline.exists() and now >= self.deadline.get()[0]:
                yield from self._close_window(key[0], delete_timer=True)  # timer not fired yet
            if not self.deadline.exists():
                self.deadline.update((now + self.window_ms,))
                self.handle.registerTimer(now + self.window_ms)
            if row.kind == "request":
                yield from self._on_request(key[0], row)
            else:
                yield from self._on_ack(key[0], row)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        if self.deadline.exists() and self.deadline.get()[0] == expiredTimerInfo.getExpiryTimeInMs():
            yield from self._close_window(key[0], delete_timer=False)

    def _on_request(self, transaction_id: str, row) -> Iterator[Row]:
        if self.request.exists():
            return  # a repeated request: the first one stands
        self.request.update((row.event_id, row.ad_id, row.event_ms))
        for ack_id, ack_ms in self.acks.get():  # acks that arrived before the request
            yield self._matched(transaction_id, ack_id, ack_ms)

    def _on_ack(self, transaction_id: str, row) -> Iterator[Row]:
        if any(ack_id == row.event_id for ack_id, _ in self.acks.get()):
            return  # a duplicate ack: already matched or already waiting
        self.acks.appendValue((row.event_id, row.event_ms))
        if self.request.exists():
            yield self._matched(transaction_id, row.event_id, row.event_ms)

    def _matched(self, transaction_id: str, ack_id: str, ack_ms: int) -> Row:
        request_id, ad_id, request_ms = self.request.get()
        return _output(transaction_id, request_id, ack_id, MATCHED, ad_id, request_ms, ack_ms)

    def _close_window(self, transaction_id: str, delete_timer: bool) -> Iterator[Row]:
        """Report what stayed unmatched, then delete the transaction's state."""
        if self.request.exists() and not self.acks.exists():
            request_id, ad_id, request_ms = self.request.get()
            yield _output(transaction_id, request_id, "", UNMATCHED_REQUEST, ad_id, request_ms, None)
        elif not self.request.exists():
            for ack_id, ack_ms in self.acks.get():
                yield _output(transaction_id, "", ack_id, UNMATCHED_ACK, None, None, ack_ms)
        if delete_timer:
            self.handle.deleteTimer(self.deadline.get()[0])
        self.request.clear()
        self.acks.clear()
        self.deadline.clear()

    def close(self) -> None:
        pass


def _output(transaction_id: str, request_id: str, ack_id: str, outcome: str, ad_id: str | None,
            request_ms: int | None, ack_ms: int | None) -> Row:
    latency = ack_ms - request_ms if outcome == MATCHED else None
    return Row(transaction_id=transaction_id, request_id=request_id, ack_id=ack_id,
               outcome=outcome, ad_id=ad_id, request_ms=request_ms, ack_ms=ack_ms,
               latency_ms=latency)
# --8<-- [end:processor]


# --8<-- [start:attribute]
def attribute(requests: DataFrame, acks: DataFrame, window_ms: int = 5 * 60_000) -> DataFrame:
    """Union the two streams into one event shape and attribute them per ``transaction_id``.

    RTM: NO in open-source 4.3 (run it with ``start_micro_batch``); yes on
    Databricks. ``timeMode="ProcessingTime"``: the only timers Databricks'
    real-time mode supports (open-source 4.3's JVM operator also has event time).
    """
    from pyspark.sql import functions as F

    events = (requests.select("transaction_id", F.lit("request").alias("kind"),
                              F.col("request_id").alias("event_id"), "ad_id", "event_ms")
              .unionByName(acks.select("transaction_id", F.lit("ack").alias("kind"),
                                       F.col("ack_id").alias("event_id"),
                                       F.lit(None).cast("string").alias("ad_id"), "event_ms")))
    return (events.groupBy("transaction_id")
            .transformWithState(AttributionProcessor(window_ms), ATTRIBUTION_SCHEMA,
                                outputMode="Append", timeMode="ProcessingTime"))
# --8<-- [end:attribute]


# --8<-- [start:start]
def start_attribution_micro_batch(requests: DataFrame, acks: DataFrame, writer: Any,
                                  checkpoint: str, window_ms: int = 5 * 60_000,
                                  trigger: str = "1 second") -> StreamingQuery:
    """Open-source Spark: micro-batch. With processing-time timers a batch runs every
    ``trigger`` even without input, so windows close at most about a trigger late."""
    from examples.real_time_pipelines import start_micro_batch

    return start_micro_batch(attribute(requests, acks, window_ms), writer, checkpoint, trigger)


def start_attribution_real_time(requests: DataFrame, acks: DataFrame, writer: Any,
                                checkpoint: str, window_ms: int = 5 * 60_000,
                                trigger: str = "5 minutes") -> StreamingQuery:
    """Databricks real-time mode: the same query and writer; only the trigger differs.
    ``trigger`` is the checkpoint interval. Open-source 4.3 stops this query with an error."""
    from examples.real_time_pipelines import start_real_time

    return start_real_time(attribute(requests, acks, window_ms), writer, checkpoint, trigger)
# --8<-- [end:start]


# --8<-- [start:sink]
def create_attribution_table(conn: psycopg.Connection, table: str = "ad_attribution") -> None:
    """Create the results table (if missing); its primary key is the pair key."""
    from psycopg import sql

    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} ("
        " transaction_id text NOT NULL, request_id text NOT NULL, ack_id text NOT NULL,"
        " outcome text NOT NULL, ad_id text, request_ms bigint, ack_ms bigint, latency_ms bigint,"
        " PRIMARY KEY (transaction_id, request_id, ack_id))").format(sql.Identifier(table)))


def attribution_writer(connection: ConnectionSettings | str,
                       table: str = "ad_attribution") -> PostgresForeachWriter:
    """The pack's Postgres writer, upserting on the pair key: a replayed row rewrites itself."""
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    return PostgresForeachWriter(connection, SinkSettings(table=table, mode="upsert",
                                                          key_columns=PAIR_KEY))
# --8<-- [end:sink]
