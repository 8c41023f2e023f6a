"""The RTM support matrix, proven: every row of pack_lab/support_matrix.py runs as a real real-time query.

Each row must end exactly as its ``expected`` says: accepted with the right
output rows, or rejected with the exact error class. With ``UPDATE_MATRIX=1``
the observed outcomes are written to ``tests/data/support_matrix_results.json``
(only when every row ran), which the generated table in
``references/real-time-mode.md`` is checked against.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pack_lab import support_matrix as sm

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "references" / "real-time-mode.md"

_observed: dict[str, dict] = {}

#: Rejections whose message must also name the plan node or sink class that failed the
#: allowlist. The lab session plans a plain `udf` as ArrowEvalPythonExec too.
NODE_NAMED = {
    "`foreachBatch` sink": ("ForeachBatchSink",),
    "Python UDF (`udf`)": ("ArrowEvalPythonExec",),
    "pandas UDF (`pandas_udf`)": ("ArrowEvalPythonExec",),
}


DATABRICKS_DOCS = ("https://docs.databricks.com/", "https://learn.microsoft.com/en-us/azure/databricks/",
                   "https://docs.azure.cn/zh-cn/databricks/")


@pytest.fixture(scope="module")
def static(spark):
    return sm.static_table(spark).cache()


@pytest.fixture(scope="module", autouse=True)
def _record_results():
    yield
    if os.environ.get("UPDATE_MATRIX") == "1" and len(_observed) == len(sm.ROWS):
        import pyspark

        sm.save_results(dict(_observed), pyspark.__version__,
                        meta={"trigger_api": "realTime= keyword", "lab_source": "LowLatencyMemoryStream"})


@pytest.mark.spark
@pytest.mark.parametrize("row", sm.ROWS, ids=[r.name for r in sm.ROWS])
def test_row_behaves_as_expected(spark, static, tmp_path, row):
    outcome = sm.run_row(spark, row, tmp_path, static=static, timeout=45)
    _observed[row.name] = sm.result_record(outcome, row)
    assert outcome.status != "timeout", f"{row.name}: {outcome.message} {outcome.details}"
    assert outcome.label == row.expected, (
        f"{row.name}: expected {row.expected}, got {outcome.label} "
        f"({outcome.stage}: {outcome.exception_type}: {outcome.message})")
    if row.message_contains:
        assert row.message_contains in outcome.message, outcome.message
    if row.name in NODE_NAMED:
        assert any(node in outcome.message for node in NODE_NAMED[row.name]), outcome.message
    if row.expected == sm.ACCEPTED and row.reduce is not None:
        assert outcome.details["output"] == row.want
    # Nothing may keep running after a row.
    assert not spark.streams.active


def test_rows_are_well_formed():
    names = [r.name for r in sm.ROWS]
    assert len(names) == len(set(names))
    assert set(NODE_NAMED) <= set(names)  # a renamed row must not silently drop its node check
    for row in sm.ROWS:
        assert row.category in {"operator", "sink", "source", "output mode", "trigger", "sizing"}
        # Databricks' docs, or their Azure copies (which sometimes carry a newer page version).
        assert row.citation.startswith(DATABRICKS_DOCS), row.name
        if row.expected == sm.ACCEPTED:
            assert row.reduce is not None or row.note, f"{row.name}: accepted without an output check"
        else:
            assert row.expected == row.expected.upper(), f"{row.name}: not an error class"


def test_recorded_results_and_reference_table_agree():
    """rows ↔ tests/data/support_matrix_results.json ↔ the table in references/real-time-mode.md."""
    issues = sm.problems(REFERENCE.read_text(encoding="utf-8"))
    assert issues == []


def test_check_catches_a_stale_table():
    results = sm.load_all_results()
    table = sm.render_table(sm.ROWS, results)
    good = f"# T\n\n{sm.TABLE_START}\n\n{table}\n\n{sm.TABLE_END}\n"
    assert sm.problems(good, results=results) == []
    stale = good.replace("accepted, output checked", "accepted", 1)
    assert any("differs" in p for p in sm.problems(stale, results=results))
    first = sm.ROWS[0].name
    pinned = results[sm.PINNED_VERSION]
    drifted = dict(results, **{sm.PINNED_VERSION: dict(pinned, **{first: dict(pinned[first], observed="SOMETHING_ELSE")})})
    assert any("expected" in p for p in sm.problems(good, results=drifted))
    missing = dict(results, **{sm.PINNED_VERSION: {k: v for k, v in pinned.items() if k != first}})
    assert any("no recorded result" in p for p in sm.problems(good, results=missing))
    assert sm.problems("# T\n", results=results) == ["table markers missing from the reference"]


def test_a_classless_rejection_is_recorded_by_its_exception_type():
    from pack_lab.rtm_probe import Outcome

    row = sm.ROWS[0]
    record = sm.result_record(Outcome("rejected", None, "build", "TypeError", "unexpected keyword"), row)
    assert record["observed"] == "TypeError"
    assert sm.result_record(Outcome("timeout"), row)["observed"] == "timeout"


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["pandas", "rows"])
def test_python_transform_with_state_works_in_micro_batch(spark, tmp_path, kind):
    """Control for the transformWithState rows: the same processors run fine without RTM."""
    from pack_lab.file_sink import JsonLinesForeachWriter, wait_for_rows
    from pack_lab.rtm_lab import RealTimeMemorySource

    source = RealTimeMemorySource(spark, sm.SCHEMA)
    grouped = source.dataframe().groupBy("k")
    if kind == "pandas":
        df = grouped.transformWithStateInPandas(
            statefulProcessor=sm._pandas_processor(), outputStructType="k STRING, count LONG",
            outputMode="Update", timeMode="None")
    else:
        df = grouped.transformWithState(
            statefulProcessor=sm._row_processor(), outputStructType="k STRING, count LONG",
            outputMode="Update", timeMode="None")
    out = tmp_path / "out"
    query = (df.writeStream.foreach(JsonLinesForeachWriter(out)).outputMode("update")
             .trigger(processingTime="1 second")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        source.add(list(sm.INPUT))
        rows = wait_for_rows(out, 3, timeout=60, query=query)
    finally:
        query.stop()
    assert sm.latest_counts("k")(rows) == {"a": 3, "b": 2, "c": 1}


@pytest.mark.spark
def test_oss_progress_has_no_rtm_latency_metrics(spark, tmp_path):
    """OSS 4.3 publishes progress once per long batch, without Databricks' rtmMetrics."""
    import json
    import time

    from pack_lab.file_sink import JsonLinesForeachWriter
    from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource

    source = RealTimeMemorySource(spark, sm.SCHEMA)
    query = (source.dataframe().select("id").writeStream
             .foreach(JsonLinesForeachWriter(tmp_path / "out")).outputMode("update")
             .trigger(realTime=MIN_REAL_TIME_TRIGGER)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        source.add(list(sm.INPUT))
        deadline = time.monotonic() + 40
        while query.lastProgress is None and time.monotonic() < deadline:
            assert query.isActive, query.exception()
            time.sleep(0.2)
        progress = query.lastProgress
    finally:
        query.stop()
    assert progress is not None, "no progress after the first long batch"
    text = progress.json if isinstance(getattr(progress, "json", None), str) else json.dumps(
        progress, default=str)
    assert '"batchId"' in text and '"sink"' in text  # a real progress report
    for name in ("rtmMetrics", "processingLatencyMs", "sourceQueuingLatencyMs", "e2eLatencyMs"):
        assert name not in text


def _console_long_batch(ctx):
    return (ctx.stream().writeStream.format("console").outputMode("update")
            .trigger(realTime="5 minutes").option("checkpointLocation", ctx.checkpoint))


@pytest.mark.spark
def test_a_row_without_output_is_not_accepted_before_a_long_batch_completes(spark, static, tmp_path):
    # A query that has not failed *yet* is not "accepted": with a 5-minute long batch nothing completes
    # within the probe's timeout, so the outcome is a timeout (a fixed watch of a few seconds called it
    # accepted, and a slow machine turned an expected refusal into "accepted").
    row = sm.MatrixRow("console, 5-minute batch", "sink", _console_long_batch, sm.ACCEPTED, "not listed")
    outcome = sm.run_row(spark, row, tmp_path, static=static, timeout=8)
    assert outcome.status == "timeout", outcome
    assert not spark.streams.active
