"""The real-time-mode support matrix as data: each row builds a real query, states its expected outcome and cites Databricks.

One list, :data:`ROWS`, drives three things so they cannot drift apart:

- ``tests/test_support_matrix.py`` runs every row as a real RTM query on the
  local lab session and asserts the outcome equals the row's ``expected``
  (``"accepted"`` with the right output rows, or the exact error class);
- with ``UPDATE_MATRIX=1`` that test records what it observed in
  ``tests/data/support_matrix_results.json``;
- ``tests/test_support_matrix_versions.py`` runs the same rows under the
  latest PySpark 4.1.x and 4.2.x (``python -m pack_lab.support_matrix --run
  OUT.json`` inside a cached venv per version, see
  :mod:`pack_lab.spark_versions`) and fails when a version's outcome differs
  from ``other_versions`` in ``tests/data/support_matrix_results.json``;
- :func:`render_table` turns rows + recorded results into the Markdown table
  (one column per version) of
  ``references/real-time-mode.md``, and ``python -m pack_lab.support_matrix
  --check references/real-time-mode.md`` fails if the committed table differs.
"""

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pack_lab.spark_versions import ALL_VERSIONS, PINNED_VERSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter

    from pack_lab.rtm_lab import RealTimeMemorySource
    from pack_lab.rtm_probe import Outcome

ACCEPTED = "accepted"
TRIGGER = "5 seconds"

#: Input schema of every row's stream: a key, an id and an event time in epoch seconds.
SCHEMA = "id INT, k STRING, t LONG"
#: Rows fed to the main source. Keys a,b,a,c,b,a; event times spread over three 10 s windows.
INPUT = (
    {"id": 0, "k": "a", "t": 0},
    {"id": 1, "k": "b", "t": 3},
    {"id": 2, "k": "a", "t": 7},
    {"id": 3, "k": "c", "t": 12},
    {"id": 4, "k": "b", "t": 15},
    {"id": 5, "k": "a", "t": 21},
)
#: Rows fed to any extra source a row creates (union, stream-stream join).
SECOND_INPUT = ({"id": 100, "k": "a", "t": 1}, {"id": 101, "k": "d", "t": 2})
#: The small static table joined in the stream-static rows.
STATIC = (("a", "alpha"), ("b", "beta"))

DOCS_REFERENCE = "https://docs.databricks.com/aws/en/structured-streaming/real-time/reference"
DOCS_SETUP = "https://docs.databricks.com/aws/en/structured-streaming/real-time/setup"
DOCS_ERRORS = "https://docs.databricks.com/error-messages/streaming-real-time-mode-error-class.html"
DOCS_PERFORMANCE = "https://docs.databricks.com/aws/en/structured-streaming/real-time-performance"
DOCS_GET_STARTED = "https://docs.databricks.com/gcp/en/structured-streaming/real-time-get-started"
#: The newer copy of the error-class page that lists SHUFFLE_MORE_THAN_ONCE (the
#: docs.databricks.com copy indexed here predates it).
DOCS_ERRORS_AZURE_CN = "https://docs.azure.cn/zh-cn/databricks/error-messages/streaming-real-time-mode-error-class"
#: The newest reference copy (seen 2026-11-25): dropDuplicatesWithinWatermark supported, stream-table
#: outer joins, a 10 MB broadcast side, Lakeflow pipelines through pipeline configuration.
DOCS_REFERENCE_NEWEST = "https://learn.microsoft.com/en-us/azure/databricks/structured-streaming/real-time/reference"
#: Real-time mode limitations page: transformWithStateInPandas is not supported, the Row-based
#: transformWithState is (audit of 2026-11-24).
DOCS_LIMITATIONS = "https://docs.databricks.com/aws/en/structured-streaming/real-time/limitations"

RESULTS_PATH = Path(__file__).resolve().parent.parent / "tests" / "data" / "support_matrix_results.json"
#: The reference's table sits between these markers; `scripts/skills.py generate` writes it (registered
#: in scripts/skillcheck/generated.py as "support-matrix", rendered by :func:`markdown_block`).
TABLE_START = "<!-- generated:support-matrix -->"
TABLE_END = "<!-- /generated:support-matrix -->"


# ---------------------------------------------------------------- context


@dataclass
class MatrixContext:
    """What a row's ``build`` gets: the session, its sources, the static table and folders."""

    spark: "SparkSession"
    source: "RealTimeMemorySource"
    static: "DataFrame"
    out_dir: str
    checkpoint: str
    work_dir: str
    extra_sources: list = field(default_factory=list)

    def stream(self) -> "DataFrame":
        """The main source as ``id, k, t, ts`` (``ts`` = ``t`` as a timestamp)."""
        from pyspark.sql import functions as F

        return self.source.dataframe().withColumn("ts", F.timestamp_seconds("t"))

    def new_stream(self) -> "DataFrame":
        """A second, independent in-memory source (fed :data:`SECOND_INPUT`)."""
        from pyspark.sql import functions as F

        from pack_lab.rtm_lab import RealTimeMemorySource

        extra = RealTimeMemorySource(self.spark, SCHEMA, 1)
        self.extra_sources.append(extra)
        return extra.dataframe().withColumn("ts", F.timestamp_seconds("t"))

    def sink(self, df: "DataFrame", mode: str = "update", trigger: str = TRIGGER) -> "DataStreamWriter":
        """``df`` into the JSON-lines ``foreach`` writer, in RTM with ``trigger``."""
        from pack_lab.file_sink import JsonLinesForeachWriter

        return (df.writeStream.foreach(JsonLinesForeachWriter(self.out_dir))
                .outputMode(mode).trigger(realTime=trigger)
                .option("checkpointLocation", self.checkpoint))


# ------------------------------------------------------ result reducers
# Each turns the collected output rows into a comparable value.


def ids(rows: Sequence[dict]) -> list[int]:
    """Sorted ``id`` values (stateless rows: each input row at most once)."""
    return sorted(r["id"] for r in rows)


def id_pairs(column: str) -> Callable[[Sequence[dict]], list]:
    def reduce(rows: Sequence[dict]) -> list:
        return sorted((r["id"], r[column]) for r in rows)
    reduce.__name__ = f"id_pairs_{column}"
    return reduce


def latest_counts(key: str, value: str = "count") -> Callable[[Sequence[dict]], dict]:
    """Per ``key``, the largest ``value`` emitted (update mode re-emits a group as it grows)."""

    def reduce(rows: Sequence[dict]) -> dict:
        out: dict = {}
        for r in rows:
            k = r[key]["start"] if isinstance(r[key], dict) else r[key]
            out[str(k)] = max(out.get(str(k), 0), int(r[value]))
        return out
    reduce.__name__ = f"latest_counts_{key}"
    return reduce


# ------------------------------------------------------ Python stateful code


def _pandas_processor():
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class _Counter(StatefulProcessor):
        def init(self, handle):
            self.state = handle.getValueState("n", "n LONG")

        def handleInputRows(self, key, rows, timerValues):
            n = self.state.get()[0] if self.state.exists() else 0
            for frame in rows:
                n += len(frame)
            self.state.update((n,))
            yield pd.DataFrame({"k": [key[0]], "count": [n]})

        def close(self):
            pass

    return _Counter()


def _row_processor():
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor

    class _Counter(StatefulProcessor):
        def init(self, handle):
            self.state = handle.getValueState("n", "n LONG")

        def handleInputRows(self, key, rows, timerValues):
            n = self.state.get()[0] if self.state.exists() else 0
            n += sum(1 for _ in rows)
            self.state.update((n,))
            yield Row(k=key[0], count=n)

        def close(self):
            pass

    return _Counter()


def _count_with_state(key, frames, state):
    import pandas as pd

    n = state.get[0] if state.exists else 0
    for frame in frames:
        n += len(frame)
    state.update((n,))
    yield pd.DataFrame({"k": [key[0]], "count": [n]})


def _upper_frames(frames: Iterator) -> Iterator:
    for frame in frames:
        yield frame.assign(K=frame["k"].str.upper())[["id", "K"]]


# ------------------------------------------------------------- row builders


def _projection(ctx):
    return ctx.sink(ctx.stream().selectExpr("id", "upper(k) AS K"))


def _filter(ctx):
    return ctx.sink(ctx.stream().where("id % 2 = 0").select("id"))


def _broadcast_join(ctx):
    from pyspark.sql import functions as F

    return ctx.sink(ctx.stream().join(F.broadcast(ctx.static), "k").select("id", "label"))


def _shuffle_join(ctx):
    # The static side is tiny, so without a hint Spark would broadcast it anyway.
    return ctx.sink(ctx.stream().join(ctx.static.hint("merge"), "k").select("id", "label"))


def _union(ctx):
    return ctx.sink(ctx.stream().select("id").unionByName(ctx.new_stream().select("id")))


def _self_union(ctx):
    df = ctx.stream().select("id")
    return ctx.sink(df.unionByName(df))


def _drop_duplicates(ctx):
    return ctx.sink(ctx.stream().dropDuplicates(["k"]).select("id", "k"))


def _drop_duplicates_wm(ctx):
    return ctx.sink(ctx.stream().withWatermark("ts", "1 minute")
                    .dropDuplicatesWithinWatermark(["k"]).select("id", "k"))


def _group_by(ctx):
    return ctx.sink(ctx.stream().groupBy("k").count())


def _dedup_then_count(ctx):
    # Two stateful operators on different keys: two shuffles in one real-time query.
    return ctx.sink(ctx.stream().dropDuplicates(["id"]).groupBy("k").count())


def _tumbling(ctx):
    from pyspark.sql import functions as F

    return ctx.sink(ctx.stream().withWatermark("ts", "1 hour")
                    .groupBy(F.window("ts", "10 seconds")).count())


def _session_window(ctx):
    from pyspark.sql import functions as F

    return ctx.sink(ctx.stream().withWatermark("ts", "1 hour")
                    .groupBy(F.session_window("ts", "5 seconds")).count())


def _repartition(ctx):
    return ctx.sink(ctx.stream().repartition(2).select("id"))


def _stream_stream_join(ctx):
    left = ctx.stream().select("id", "k")
    right = ctx.new_stream().selectExpr("k", "id AS other")
    return ctx.sink(left.join(right, "k").select("id", "other"))


def _python_udf(ctx):
    from pyspark.sql import functions as F

    upper = F.udf(lambda s: s.upper(), "string")
    return ctx.sink(ctx.stream().select("id", upper("k").alias("K")))


def _pandas_udf(ctx):
    import pandas as pd
    from pyspark.sql import functions as F

    @F.pandas_udf("string")
    def upper(s: pd.Series) -> pd.Series:
        return s.str.upper()

    return ctx.sink(ctx.stream().select("id", upper("k").alias("K")))


def _map_in_pandas(ctx):
    return ctx.sink(ctx.stream().select("id", "k").mapInPandas(_upper_frames, "id INT, K STRING"))


def _tws_in_pandas(ctx):
    return ctx.sink(ctx.stream().groupBy("k").transformWithStateInPandas(
        statefulProcessor=_pandas_processor(), outputStructType="k STRING, count LONG",
        outputMode="Update", timeMode="None"))


def _tws_rows(ctx):
    return ctx.sink(ctx.stream().groupBy("k").transformWithState(
        statefulProcessor=_row_processor(), outputStructType="k STRING, count LONG",
        outputMode="Update", timeMode="None"))


def _apply_in_pandas_with_state(ctx):
    return ctx.sink(ctx.stream().groupBy("k").applyInPandasWithState(
        _count_with_state, outputStructType="k STRING, count LONG",
        stateStructType="n LONG", outputMode="update", timeoutConf="NoTimeout"))


def _foreach_batch(ctx):
    def write(batch, epoch_id):
        batch.count()

    # skills: allow RTM003 -- this matrix row proves foreachBatch is rejected in real-time mode
    return (ctx.stream().writeStream.foreachBatch(write).outputMode("update")
            .trigger(realTime=TRIGGER).option("checkpointLocation", ctx.checkpoint))


def _console(ctx):
    return (ctx.stream().writeStream.format("console").outputMode("update")
            .trigger(realTime=TRIGGER).option("checkpointLocation", ctx.checkpoint))


def _memory(ctx):
    return (ctx.stream().writeStream.format("memory").queryName(f"rtm_matrix_{Path(ctx.work_dir).name}")
            .outputMode("update").trigger(realTime=TRIGGER)
            .option("checkpointLocation", ctx.checkpoint))


def _rate_source(ctx):
    return ctx.sink(ctx.spark.readStream.format("rate").option("rowsPerSecond", 5).load())


def _file_source(ctx):
    folder = Path(ctx.work_dir) / "text-in"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "part-0.txt").write_text("a\nb\n", encoding="utf-8")
    return ctx.sink(ctx.spark.readStream.format("text").load(str(folder)))


def _append(ctx):
    return ctx.sink(ctx.stream().select("id"), mode="append")


def _complete(ctx):
    return ctx.sink(ctx.stream().groupBy("k").count(), mode="complete")


def _trigger_4s(ctx):
    return ctx.sink(ctx.stream().select("id"), trigger="4 seconds")


def _trigger_true(ctx):
    from pack_lab.file_sink import JsonLinesForeachWriter

    return (ctx.stream().select("id").writeStream.foreach(JsonLinesForeachWriter(ctx.out_dir))
            # skills: allow RTM001 -- this matrix row proves realTime=True raises PySparkValueError
            .outputMode("update").trigger(realTime=True))


# --------------------------------------------------------------- the rows


@dataclass(frozen=True)
class MatrixRow:
    """One feature probed in real-time mode.

    ``build(ctx)`` returns a ``DataStreamWriter`` ready to ``start()``.
    ``expected`` is ``"accepted"`` or the exact error class. For accepted rows
    with a ``foreach`` sink, ``reduce(output_rows) == want`` must hold.
    """

    name: str
    category: str
    build: Callable[[MatrixContext], Any]
    expected: str
    databricks: str
    citation: str = DOCS_REFERENCE
    reduce: Callable[[Sequence[dict]], Any] | None = None
    want: Any = None
    source_partitions: int = 1
    shuffle_partitions: int | None = None
    note: str = ""
    message_contains: str = ""  # a rejection's message must mention this (e.g. a conf name)


_K_UPPER = [(0, "A"), (1, "B"), (2, "A"), (3, "C"), (4, "B"), (5, "A")]
_JOINED = [(0, "alpha"), (1, "beta"), (2, "alpha"), (4, "beta"), (5, "alpha")]
_COUNTS = {"a": 3, "b": 2, "c": 1}
_ALLOWLIST = "STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST"
#: PySpark transformWithState* dies while planning the first long batch (reading state
#: metadata that RTM has not written); the same processor runs in micro-batch.
_TWS_FAILURE = "STDS_FAILED_TO_READ_OPERATOR_METADATA"
_TWS_NOTE = "fails planning the first long batch; the same processor works in micro-batch"

ROWS: tuple[MatrixRow, ...] = (
    # operators
    MatrixRow("projection (`select`, `selectExpr`)", "operator", _projection, ACCEPTED,
              "supported", reduce=id_pairs("K"), want=_K_UPPER),
    MatrixRow("filter (`where`)", "operator", _filter, ACCEPTED, "supported",
              reduce=ids, want=[0, 2, 4]),
    MatrixRow("stream-static join, broadcast", "operator", _broadcast_join, ACCEPTED,
              "supported, inner and outer; broadcast side 10 MB or less (newest reference)",
              citation=DOCS_REFERENCE_NEWEST, reduce=id_pairs("label"), want=_JOINED),
    MatrixRow("stream-static join, non-broadcast (`merge` hint)", "operator", _shuffle_join,
              _ALLOWLIST, "not supported (table join without broadcast)", citation=DOCS_REFERENCE_NEWEST),
    MatrixRow("union of two sources", "operator", _union, ACCEPTED,
              "supported with limitations", reduce=ids, want=[0, 1, 2, 3, 4, 5, 100, 101]),
    MatrixRow("union of a source with itself", "operator", _self_union,
              "STREAMING_REAL_TIME_MODE.IDENTICAL_SOURCES_IN_UNION_NOT_SUPPORTED",
              "union supported with limitations"),
    MatrixRow("`dropDuplicates`", "operator", _drop_duplicates, ACCEPTED,
              "supported (state is unbounded)", reduce=id_pairs("k"),
              want=[(0, "a"), (1, "b"), (3, "c")]),
    MatrixRow("`dropDuplicatesWithinWatermark`", "operator", _drop_duplicates_wm, _ALLOWLIST,
              "supported on the newest reference (older copies: not supported)",
              citation=DOCS_REFERENCE_NEWEST),
    MatrixRow("`groupBy().count()`", "operator", _group_by, ACCEPTED, "supported",
              reduce=latest_counts("k"), want=_COUNTS),
    MatrixRow("`dropDuplicates` then `groupBy().count()` (two shuffles)", "operator",
              _dedup_then_count, ACCEPTED,
              "rejected: more than one shuffle (`SHUFFLE_MORE_THAN_ONCE`); use one stateful operator per query",
              citation=DOCS_ERRORS_AZURE_CN, reduce=latest_counts("k"), want=_COUNTS,
              shuffle_partitions=1),
    MatrixRow("tumbling window aggregation", "operator", _tumbling, ACCEPTED,
              "supported (tumbling and sliding)", reduce=latest_counts("window"),
              want={"1970-01-01 00:00:00": 3, "1970-01-01 00:00:10": 2, "1970-01-01 00:00:20": 1}),
    MatrixRow("session window", "operator", _session_window,
              "STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION", "not supported", citation=DOCS_ERRORS,
              note="session windows cannot run in update mode, the only RTM output mode"),
    MatrixRow("`repartition`", "operator", _repartition, ACCEPTED, "not listed",
              reduce=ids, want=[0, 1, 2, 3, 4, 5]),
    MatrixRow("stream-stream join", "operator", _stream_stream_join, _ALLOWLIST,
              "inner joins only, Databricks Runtime 18 LTS and above, with extra configuration; outer joins not supported",
              citation=DOCS_REFERENCE_NEWEST),
    MatrixRow("Python UDF (`udf`)", "operator", _python_udf, _ALLOWLIST,
              "supported with limitations",
              message_contains="spark.sql.streaming.realTimeMode.allowlistCheck"),
    MatrixRow("pandas UDF (`pandas_udf`)", "operator", _pandas_udf, _ALLOWLIST,
              "Python UDFs supported with limitations"),
    MatrixRow("`mapInPandas`", "operator", _map_in_pandas, _ALLOWLIST, "not supported"),
    MatrixRow("`transformWithStateInPandas`", "operator", _tws_in_pandas, _TWS_FAILURE,
              "not supported; use the Row-based `transformWithState`", citation=DOCS_LIMITATIONS,
              note=_TWS_NOTE),
    MatrixRow("`transformWithState` (PySpark, Row-based)", "operator", _tws_rows, _TWS_FAILURE,
              "`transformWithState` supported (per-row calls, processing-time timers)",
              note=_TWS_NOTE),
    MatrixRow("`applyInPandasWithState`", "operator", _apply_in_pandas_with_state, _ALLOWLIST,
              "not supported (arbitrary stateful operations)", citation=DOCS_ERRORS),
    # sinks
    MatrixRow("`foreach` sink", "sink", _filter, ACCEPTED, "supported",
              reduce=ids, want=[0, 2, 4], note="every accepted row here uses it"),
    MatrixRow("`foreachBatch` sink", "sink", _foreach_batch, _ALLOWLIST, "not supported",
              message_contains="spark.sql.streaming.realTimeMode.allowlistCheck"),
    MatrixRow("console sink", "sink", _console, ACCEPTED, "not listed",
              note="accepted = a long batch completed with no error after the input was added"),
    MatrixRow("memory sink (`format(\"memory\")`)", "sink", _memory, _ALLOWLIST, "not listed"),
    # sources
    MatrixRow("`rate` source", "source", _rate_source,
              "STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED",
              "used by Databricks' real-time tutorial (not in the reference's source table)",
              citation=DOCS_GET_STARTED),
    MatrixRow("file source (`text`)", "source", _file_source,
              "STREAMING_REAL_TIME_MODE.INPUT_STREAM_NOT_SUPPORTED",
              "not listed: sources are Kafka, Event Hubs, Kinesis, MSK; Delta is not supported"),
    # output modes
    MatrixRow("output mode `update` (stateless query)", "output mode", _projection, ACCEPTED,
              "required", reduce=id_pairs("K"), want=_K_UPPER),
    MatrixRow("output mode `append` (stateless query)", "output mode", _append,
              "STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED", "not supported"),
    MatrixRow("output mode `complete`", "output mode", _complete,
              "STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED", "not supported"),
    # triggers
    MatrixRow("`trigger(realTime=\"5 seconds\")`", "trigger", _projection, ACCEPTED,
              "any duration; docs use `\"5 minutes\"`", citation=DOCS_SETUP,
              reduce=id_pairs("K"), want=_K_UPPER),
    MatrixRow("`trigger(realTime=\"4 seconds\")`", "trigger", _trigger_4s,
              "INVALID_STREAMING_REAL_TIME_MODE_TRIGGER_INTERVAL", "not documented", citation=DOCS_SETUP,
              message_contains="spark.sql.streaming.realTimeMode.minBatchDuration"),
    MatrixRow("`trigger(realTime=True)`", "trigger", _trigger_true, "VALUE_NOT_NON_EMPTY_STR",
              "not valid: Python needs a duration string", citation=DOCS_SETUP),
    # sizing
    MatrixRow("stateful query, 2 source + 4 shuffle partitions on 4 slots", "sizing", _group_by,
              "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT",
              "not scheduled: slots must cover every task of every stage",
              citation=DOCS_PERFORMANCE,
              source_partitions=2, shuffle_partitions=4),
)


# ---------------------------------------------------------------- running


def static_table(spark: "SparkSession") -> "DataFrame":
    """The small static DataFrame every join row uses."""
    return spark.createDataFrame(list(STATIC), "k STRING, label STRING")


def run_row(spark: "SparkSession", row: MatrixRow, work_dir: str | Path,
            static: "DataFrame | None" = None, timeout: float = 45.0) -> "Outcome":
    """Run one row as a real RTM query and return what happened (the query is always stopped)."""
    from pack_lab.file_sink import read_rows
    from pack_lab.rtm_lab import RealTimeMemorySource
    from pack_lab.rtm_probe import run_and_classify

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    if row.shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(row.shuffle_partitions))
    try:
        ctx = MatrixContext(
            spark=spark,
            source=RealTimeMemorySource(spark, SCHEMA, row.source_partitions),
            static=static if static is not None else static_table(spark),
            out_dir=str(work / "out"), checkpoint=str(work / "checkpoint"), work_dir=str(work),
        )

        running: list = []

        def feed(query):
            running.append(query)
            ctx.source.add(list(INPUT))
            for extra in ctx.extra_sources:
                extra.add(list(SECOND_INPUT))

        if row.reduce is not None:
            def until() -> bool:
                return row.reduce(read_rows(ctx.out_dir)) == row.want
        else:
            # No output to check: accepted only once a long batch has completed after the input was
            # added. Watching for a fixed time instead called a query "accepted" when it had simply
            # not failed yet (a slow machine plans the first batch late).
            def until() -> bool:
                return bool(running and running[0].recentProgress)

        outcome = run_and_classify(
            build=lambda: row.build(ctx), start=lambda writer: writer.start(),
            feed=feed, until=until, timeout=timeout)
        if row.reduce is not None:
            outcome.details["output"] = row.reduce(read_rows(ctx.out_dir))
        return outcome
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)


# ------------------------------------------------- other PySpark versions


def install_version_shims() -> dict:
    """Let the rows run on an older PySpark; return what was used (recorded with the results).

    - PySpark 4.1 has no ``realTime=`` keyword. When it is missing, a duration
      string is passed to the JVM trigger ``Trigger.RealTime(duration)``
      through py4j; anything else (e.g. ``realTime=True``) goes to the original
      method, so it fails exactly as that version fails.
    - The lab's ``RealTimeMemorySource`` refuses versions below 4.3 by default;
      its class, ``LowLatencyMemoryStream``, ships in 4.1 and 4.2 too, so the
      refusal is lowered to 4.1 in this (child) process only.
    """
    import inspect

    import pyspark
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from pack_lab import rtm_lab

    rtm_lab.MIN_SPARK_VERSION = (4, 1)
    used = {"spark_version": pyspark.__version__, "trigger_api": "realTime= keyword",
            "lab_source": "LowLatencyMemoryStream"}
    if "realTime" in inspect.signature(DataStreamWriter.trigger).parameters:
        return used
    original = DataStreamWriter.trigger

    def trigger(self, *args, realTime=None, **kwargs):
        if realTime is None:
            return original(self, *args, **kwargs)
        if not isinstance(realTime, str) or args or kwargs:
            return original(self, *args, realTime=realTime, **kwargs)
        jvm = self._spark.sparkContext._jvm
        self._jwrite = self._jwrite.trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(realTime))
        return self

    DataStreamWriter.trigger = trigger
    used["trigger_api"] = "JVM Trigger.RealTime through py4j (no realTime= keyword)"
    return used


def run_all(work_dir: str | Path, rows: Sequence[MatrixRow] = ROWS, timeout: float = 45.0,
            progress: Callable[[str], None] | None = None) -> dict:
    """Run every row on this interpreter's PySpark, in a fresh local lab session; return the results."""
    import tempfile

    from pyspark.sql import SparkSession

    from pack_lab.rtm_lab import LabConfig, session_conf

    used = install_version_shims()
    builder = SparkSession.builder
    for key, value in session_conf(LabConfig(cores=4, shuffle_partitions=2,
                                             app_name="rtm-matrix-versions")).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    results: dict = {}
    try:
        static = static_table(spark).cache()
        for i, row in enumerate(rows, 1):
            with tempfile.TemporaryDirectory(dir=str(work_dir)) as tmp:
                outcome = run_row(spark, row, tmp, static=static, timeout=timeout)
            for query in spark.streams.active:
                query.stop()
            results[row.name] = result_record(outcome, row)
            if progress:
                progress(f"[{i}/{len(rows)}] {row.name}: {results[row.name]['observed']}")
    finally:
        spark.stop()
    return {**used, "rows": results}


# -------------------------------------------------------------- rendering


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


_WHERE = {"build": "`trigger()`", "start": "`start()`", "run": "query dies"}


def _observed_cell(result: dict | None) -> str:
    if result is None:
        return "not run"
    label = result["observed"]
    if label == ACCEPTED:
        return "accepted, output checked" if result.get("output_checked") else "accepted"
    if label == "timeout":
        return "no error, expected output missing"
    where = _WHERE.get(result.get("stage"), result.get("stage") or "")
    return f"`{label}` ({where})" if where else f"`{label}`"


def render_table(rows: Sequence[MatrixRow] = ROWS, results: dict | None = None) -> str:
    """The Markdown matrix: one column per PySpark version (recorded runs), Databricks cited.

    ``results`` maps a version to its recorded rows (see :func:`load_all_results`).
    """
    results = results or {}
    versions = [v for v in ALL_VERSIONS if v in results] + sorted(set(results) - set(ALL_VERSIONS))
    header = ["Feature", "Kind"] + [f"PySpark {v}" for v in versions] + ["Databricks"]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in rows:
        cells = [_cell(row.name), row.category]
        for version in versions:
            cell = _observed_cell(results[version].get(row.name))
            if row.note and version == PINNED_VERSION:
                cell = f"{cell}; {row.note}"
            cells.append(_cell(cell))
        cells.append(f"{_cell(row.databricks)} ([docs]({row.citation}))")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The pinned version's run is the file's top level (``spark_version``, ``rows``); the other
#: versions' runs sit under ``other_versions`` -> version -> the same shape.
OTHER_RUNS_KEY = "other_versions"


def read_results_file(path: str | Path = RESULTS_PATH) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def load_results(path: str | Path = RESULTS_PATH) -> dict:
    """The pinned version's recorded rows."""
    return read_results_file(path)["rows"]


def runs_from(data: dict) -> dict:
    """``{version: run}`` from a parsed results file, oldest first (a run has ``rows`` and how it ran)."""
    runs = {v: dict(run) for v, run in data.get(OTHER_RUNS_KEY, {}).items()}
    pinned = {k: v for k, v in data.items() if k != OTHER_RUNS_KEY}
    runs[pinned.get("spark_version", PINNED_VERSION)] = pinned
    order = {v: i for i, v in enumerate(ALL_VERSIONS)}
    return dict(sorted(runs.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))


def load_run(version: str, path: str | Path = RESULTS_PATH) -> dict:
    """A version's whole recorded run: rows plus how it ran (trigger API, lab source)."""
    runs = runs_from(read_results_file(path))
    if version not in runs:
        raise KeyError(f"no recorded support-matrix run for pyspark {version} in {path}")
    return runs[version]


def load_all_results(path: str | Path = RESULTS_PATH) -> dict:
    """``{version: rows}`` for every version with a recorded run, oldest first."""
    return {v: run["rows"] for v, run in runs_from(read_results_file(path)).items()}


def markdown_block(data: dict) -> str:
    """The reference's table from the parsed results file (pure: same JSON, same Markdown)."""
    return render_table(ROWS, {v: run["rows"] for v, run in runs_from(data).items()})


def save_results(results: dict, spark_version: str, path: str | Path = RESULTS_PATH,
                 meta: dict | None = None) -> None:
    """Record one version's run in the shared results file, keeping the other versions' runs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = read_results_file(path) if path.exists() else {}
    ordered = {row.name: results[row.name] for row in ROWS if row.name in results}
    run = {"spark_version": spark_version,
           **{k: v for k, v in (meta or {}).items() if k not in ("rows", "spark_version", OTHER_RUNS_KEY)},
           "rows": ordered}
    if spark_version == PINNED_VERSION:
        others = data.get(OTHER_RUNS_KEY, {})
        data = {**run, OTHER_RUNS_KEY: others} if others else run
    else:
        others = dict(data.get(OTHER_RUNS_KEY, {}))
        others[spark_version] = run
        data[OTHER_RUNS_KEY] = dict(sorted(others.items()))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def result_record(outcome: "Outcome", row: MatrixRow) -> dict:
    """What the results file keeps for one row.

    A rejection without an error class (e.g. PySpark 4.1's ``TypeError`` for an
    unknown ``realTime`` keyword) is recorded by its exception type.
    """
    if outcome.status == "timeout":
        observed = "timeout"
    elif outcome.status == "rejected" and not outcome.error_class:
        observed = outcome.exception_type or "rejected"
    else:
        observed = outcome.label
    return {
        "observed": observed,
        "stage": outcome.stage,
        "exception_type": outcome.exception_type,
        "output_checked": outcome.status == ACCEPTED and row.reduce is not None,
    }


def changed_rows(observed: dict, recorded: dict) -> list[str]:
    """Rows whose outcome differs between two runs of the same version (empty: unchanged)."""
    found = []
    for name in sorted(set(observed) | set(recorded)):
        was, now = recorded.get(name), observed.get(name)
        if was is None:
            found.append(f"{name!r}: no recorded outcome (observed {now['observed']!r})")
        elif now is None:
            found.append(f"{name!r}: recorded {was['observed']!r} but not run")
        elif (was["observed"], was.get("stage"), was.get("output_checked")) != (
                now["observed"], now.get("stage"), now.get("output_checked")):
            found.append(f"{name!r}: recorded {was['observed']!r} ({was.get('stage')}), "
                         f"observed {now['observed']!r} ({now.get('stage')})")
    return found


def problems(markdown: str, rows: Sequence[MatrixRow] = ROWS, results: dict | None = None) -> list[str]:
    """Every way the reference's table, the rows and the recorded results disagree.

    ``results`` maps versions to recorded rows; the pinned version's outcomes
    must equal each row's ``expected``, every other version must have a
    recorded outcome for every row.
    """
    found: list[str] = []
    results = load_all_results() if results is None else results
    names = [row.name for row in rows]
    if len(set(names)) != len(names):
        found.append("duplicate row names")
    for version, recorded in results.items():
        for row in rows:
            result = recorded.get(row.name)
            if result is None:
                found.append(f"no recorded result for row {row.name!r} under pyspark {version}")
            elif version == PINNED_VERSION and result["observed"] != row.expected:
                found.append(f"row {row.name!r}: expected {row.expected!r}, recorded {result['observed']!r}")
        for name in set(recorded) - set(names):
            found.append(f"recorded result for unknown row {name!r} under pyspark {version}")
    if PINNED_VERSION not in results:
        found.append(f"no recorded results for pyspark {PINNED_VERSION}")
    if TABLE_START not in markdown or TABLE_END not in markdown:
        found.append("table markers missing from the reference")
        return found
    committed = markdown.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip()
    if committed != render_table(rows, results).strip():
        found.append("the reference's matrix table differs from render_table(); "
                     "regenerate it with `python scripts/skills.py generate`")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", metavar="MARKDOWN", help="fail if the table in MARKDOWN is stale")
    group.add_argument("--print", action="store_true", help="print the rendered table")
    group.add_argument("--run", metavar="JSON", help="run every row on this interpreter's PySpark "
                       "and write the outcomes to JSON (used by pack_lab/spark_versions.py)")
    args = parser.parse_args(argv)
    if args.print:
        print(render_table(ROWS, load_all_results()))
        return 0
    if args.run:
        import tempfile

        out = Path(args.run)
        with tempfile.TemporaryDirectory(prefix="rtm-matrix-") as work:
            run = run_all(work, progress=lambda line: print(line, file=sys.stderr, flush=True))
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
        tmp.replace(out)
        return 0
    path = Path(args.check)
    text = path.read_text(encoding="utf-8")
    issues = problems(text)
    for issue in issues:
        print(f"{path}: {issue}", file=sys.stderr)
    return 1 if issues else 0


if __name__ == "__main__":
    sys.exit(main())
