"""Streaming pipelines for the simulator's events, each marked with where it runs in real-time mode.

Every pipeline is a function from a streaming DataFrame with the columns of
:data:`pack_lab.upstream_simulator.EVENT_SCHEMA_DDL` to a streaming
DataFrame. :data:`PIPELINES` records, for each one, whether it runs under
real-time mode (RTM) in open-source Spark 4.3 (verified by
``tests/test_pipelines.py``) and on Databricks (from the Databricks
real-time mode reference). :func:`start_real_time` and
:func:`start_micro_batch` start any of them into a ``foreach`` writer.

Use one stateful pipeline per real-time query on Databricks: chaining two
(e.g. ``device_totals_aggregate(dedup_events(events))``) needs two shuffles,
which open-source 4.3 runs but Databricks rejects (``SHUFFLE_MORE_THAN_ONCE``);
chain two queries through a Kafka topic instead.

What each pipeline must emit for a list of input rows is computed in plain
Python by the ``expected_*`` functions of ``pack_lab/oracles.py``; the tests
compare the real query's output with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StatefulProcessor
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming import StreamingQuery


@dataclass(frozen=True)
class PipelineSupport:
    """Where a pipeline runs in real-time mode."""

    oss_rtm: bool
    databricks_rtm: bool
    note: str


#: name -> where it runs. OSS column: ``tests/test_pipelines.py``; Databricks
#: column: docs.databricks.com/aws/en/structured-streaming/real-time/reference.
PIPELINES: dict[str, PipelineSupport] = {
    "with_ingest_time": PipelineSupport(True, True, "stateless projection; no shuffle"),
    "dedup_events": PipelineSupport(
        True, True, "dropDuplicates on event_id; state grows with every distinct id"),
    "dedup_events_bounded": PipelineSupport(
        True, True, "watermark + dropDuplicates(event_id, event_time); state evicted at batch ends"),
    "windowed_device_stats": PipelineSupport(
        True, True, "tumbling window + watermark; one update row per input row"),
    "device_totals_aggregate": PipelineSupport(
        True, True, "groupBy(device_id).agg; unbounded key state, one update per input row"),
    "device_totals_stateful": PipelineSupport(
        False, True, "PySpark transformWithState: micro-batch only in OSS 4.3; "
        "Databricks RTM calls handleInputRows per row"),
    "device_totals_stateful_pandas": PipelineSupport(
        False, True, "transformWithStateInPandas: micro-batch only in OSS 4.3"),
}


# --8<-- [start:ingest]
def with_ingest_time(events: DataFrame) -> DataFrame:
    """Pass every column through and add ``event_time`` and a per-row ``ingest_ms``.

    RTM: yes (OSS 4.3 and Databricks). ``current_timestamp()`` would NOT do
    for ``ingest_ms``: it is fixed once per batch, and an RTM batch lasts as
    long as its trigger (minutes in production). ``reflect`` calls the JVM
    clock for each row instead.
    """
    from pyspark.sql import functions as F

    return events.select(
        "*",
        F.timestamp_millis("event_ms").alias("event_time"),
        F.expr("reflect('java.lang.System', 'currentTimeMillis')").cast("bigint").alias("ingest_ms"),
    )
# --8<-- [end:ingest]


# --8<-- [start:dedup]
def dedup_events(events: DataFrame) -> DataFrame:
    """One row per ``event_id``: the first copy seen wins, retries are dropped.

    RTM: yes (OSS 4.3 and Databricks). State keeps every id ever seen and
    is never evicted -- size the state store for the lifetime id count, or
    use :func:`dedup_events_bounded`.
    """
    return events.dropDuplicates(["event_id"])


def dedup_events_bounded(events: DataFrame, max_delay: str = "10 minutes") -> DataFrame:
    """Deduplicate with bounded state: watermark on ``event_time`` plus the id.

    RTM: yes (OSS 4.3, verified; Databricks lists ``dropDuplicates`` and
    watermarks as supported). Including the event-time column in the keys lets
    Spark drop an id's state once the watermark passes its event time. A
    retry must carry the same ``event_ms`` as its original (the simulator's
    do); a copy arriving more than ``max_delay`` behind the newest event time
    is no longer recognised. ``dropDuplicatesWithinWatermark`` would be the
    usual tool, but open-source RTM rejects it (Spark 5.0 adds it; the newest
    Databricks reference lists it as supported).
    """
    from pyspark.sql import functions as F

    return (events
            .withColumn("event_time", F.timestamp_millis("event_ms"))
            .withWatermark("event_time", max_delay)
            .dropDuplicates(["event_id", "event_time"]))
# --8<-- [end:dedup]


# --8<-- [start:window]
def windowed_device_stats(events: DataFrame, window: str = "10 seconds",
                          max_delay: str = "1 minute") -> DataFrame:
    """Per device and tumbling event-time window: ``events``, ``value_sum``, ``value_max``.

    RTM: yes (OSS 4.3 and Databricks), in update mode. Each input row
    produces one updated row for its (window, device) -- the sink sees a
    running total, so write it as an upsert on (device_id, window_start).
    The watermark bounds state: a window's state is dropped at the first
    batch boundary after the watermark passes the window's end.
    """
    from pyspark.sql import functions as F

    return (events
            .withColumn("event_time", F.timestamp_millis("event_ms"))
            .withWatermark("event_time", max_delay)
            .groupBy(F.window("event_time", window), "device_id")
            .agg(F.count("*").alias("events"),
                 F.sum("value").alias("value_sum"),
                 F.max("value").alias("value_max"))
            .select("device_id",
                    F.unix_millis(F.col("window.start")).alias("window_start_ms"),
                    F.unix_millis(F.col("window.end")).alias("window_end_ms"),
                    "events", "value_sum", "value_max"))
# --8<-- [end:window]


#: Output of the per-device running totals, whichever way they are computed.
DEVICE_TOTALS_SCHEMA = StructType([
    StructField("device_id", StringType()),
    StructField("events", LongType()),
    StructField("value_sum", DoubleType()),
    StructField("last_event_ms", LongType()),
])

_TOTALS_STATE_SCHEMA = StructType([
    StructField("events", LongType()),
    StructField("value_sum", DoubleType()),
    StructField("last_event_ms", LongType()),
])


# --8<-- [start:totals-aggregate]
def device_totals_aggregate(events: DataFrame) -> DataFrame:
    """Running totals per device with a plain aggregation: the RTM-capable way in OSS.

    RTM: yes (OSS 4.3 and Databricks). Same output as
    :func:`device_totals_stateful`; key state is never evicted (there is no
    window), which is fine for a bounded set of devices.
    """
    from pyspark.sql import functions as F

    return (events.groupBy("device_id")
            .agg(F.count("*").alias("events"),
                 F.sum("value").alias("value_sum"),
                 F.max("event_ms").alias("last_event_ms")))
# --8<-- [end:totals-aggregate]


# --8<-- [start:totals-processor]
class DeviceTotalsProcessor(StatefulProcessor):
    """Per-device running totals in a ``ValueState`` (PySpark ``transformWithState``, Row API).

    ``handle_input_rows`` gets the rows of one device (all of a micro-batch's
    rows in micro-batch; on Databricks RTM, one row per call) and emits the
    device's new totals.
    """

    def init(self, handle) -> None:
        self.totals = handle.getValueState("totals", _TOTALS_STATE_SCHEMA)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Any]:
        from pyspark.sql import Row

        events, value_sum, last_ms = self.totals.get() if self.totals.exists() else (0, 0.0, None)
        for row in rows:
            events += 1
            value_sum += row.value
            last_ms = row.event_ms if last_ms is None else max(last_ms, row.event_ms)
        self.totals.update((events, value_sum, last_ms))
        yield Row(device_id=key[0], events=events, value_sum=value_sum, last_event_ms=last_ms)

    def close(self) -> None:
        pass


def device_totals_stateful(events: DataFrame) -> DataFrame:
    """Running totals per device with ``transformWithState`` (custom state).

    RTM: NO in OSS 4.3 -- the PySpark operator is not on the RTM allowlist
    and the query dies after start (use :func:`device_totals_aggregate`).
    Micro-batch: yes. Databricks RTM: yes, with per-row calls and
    processing-time timers only.
    """
    return (events.groupBy("device_id")
            .transformWithState(DeviceTotalsProcessor(), DEVICE_TOTALS_SCHEMA,
                                outputMode="Update", timeMode="None"))
# --8<-- [end:totals-processor]


class DeviceTotalsPandasProcessor(StatefulProcessor):
    """The same totals for ``transformWithStateInPandas`` (rows arrive as pandas DataFrames)."""

    def init(self, handle) -> None:
        self.totals = handle.getValueState("totals", _TOTALS_STATE_SCHEMA)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Any]:
        import pandas as pd

        events, value_sum, last_ms = self.totals.get() if self.totals.exists() else (0, 0.0, None)
        for frame in rows:
            events += len(frame)
            value_sum += float(frame["value"].sum())
            batch_max = int(frame["event_ms"].max())
            last_ms = batch_max if last_ms is None else max(last_ms, batch_max)
        self.totals.update((events, value_sum, last_ms))
        yield pd.DataFrame({"device_id": [key[0]], "events": [events],
                            "value_sum": [value_sum], "last_event_ms": [last_ms]})

    def close(self) -> None:
        pass


def device_totals_stateful_pandas(events: DataFrame) -> DataFrame:
    """:func:`device_totals_stateful` with ``transformWithStateInPandas``; micro-batch only in OSS."""
    return (events.groupBy("device_id")
            .transformWithStateInPandas(DeviceTotalsPandasProcessor(), DEVICE_TOTALS_SCHEMA,
                                        outputMode="Update", timeMode="None"))


# --8<-- [start:start]
def start_real_time(df: DataFrame, writer: Any, checkpoint: str, trigger: str = "5 seconds",
                    query_name: str | None = None) -> StreamingQuery:
    """Start ``df`` into a ``foreach`` writer in real-time mode (update mode, duration trigger).

    ``trigger`` is the checkpoint interval, not a latency: open-source Spark
    refuses less than 5 seconds; production queries use minutes.
    """
    stream = (df.writeStream
              .foreach(writer)
              .outputMode("update")
              .trigger(realTime=trigger)
              .option("checkpointLocation", checkpoint))
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()


def start_micro_batch(df: DataFrame, writer: Any, checkpoint: str,
                      trigger: str = "0 seconds", query_name: str | None = None) -> StreamingQuery:
    """The micro-batch twin of :func:`start_real_time` (for operators RTM lacks)."""
    stream = (df.writeStream
              .foreach(writer)
              .outputMode("update")
              .trigger(processingTime=trigger)
              .option("checkpointLocation", checkpoint))
    if query_name:
        stream = stream.queryName(query_name)
    return stream.start()
# --8<-- [end:start]
