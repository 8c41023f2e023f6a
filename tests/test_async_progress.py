"""Async progress tracking in open-source Spark 4.3 real-time mode: on by default for stateless queries only.

Which engine runs a query is visible on the JVM side: a query with async
progress tracking runs in ``AsyncProgressTrackingMicroBatchExecution``, one
without it in plain ``MicroBatchExecution``. The tests start real real-time
queries and read that class, so they assert the behaviour itself, not a
setting's name.
"""

from __future__ import annotations

import time

import pytest

from pack_lab.file_sink import JsonLinesForeachWriter, wait_for_rows
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource

APT = "AsyncProgressTrackingMicroBatchExecution"
PLAIN = "MicroBatchExecution"
DEFAULT_CONF = "spark.sql.streaming.realTimeMode.asyncProgressTrackingByDefault.enabled"


def _engine(query) -> str:
    return query._jsq.streamingQuery().getClass().getSimpleName()


def _start(spark, tmp_path, stateful: bool, **options):
    source = RealTimeMemorySource(spark, "id INT, k STRING")
    df = source.dataframe()
    df = df.groupBy("k").count() if stateful else df.select("id")
    writer = (df.writeStream.foreach(JsonLinesForeachWriter(tmp_path / "out"))
              .outputMode("update").trigger(realTime=MIN_REAL_TIME_TRIGGER)
              .option("checkpointLocation", str(tmp_path / "ck")))
    for key, value in options.items():
        writer = writer.option(key, value)
    return source, writer.start()


@pytest.mark.spark
def test_default_setting_is_on(spark):
    assert spark.conf.get(DEFAULT_CONF) == "true"


@pytest.mark.spark
@pytest.mark.parametrize("stateful, options, engine", [
    (False, {}, APT),                                         # stateless: on by default
    (False, {"asyncProgressTrackingEnabled": "false"}, PLAIN),  # the writer option wins
    (True, {}, PLAIN),                                        # stateful: off by default
], ids=["stateless-default", "stateless-opt-out", "stateful-default"])
def test_engine_chosen_for_a_real_time_query(spark, tmp_path, stateful, options, engine):
    source, query = _start(spark, tmp_path, stateful, **options)
    try:
        source.add([{"id": 1, "k": "a"}, {"id": 2, "k": "b"}])
        # The query really runs in that engine: rows come out.
        rows = wait_for_rows(tmp_path / "out", 2, timeout=40, query=query)
        assert len(rows) >= 2
        assert _engine(query) == engine
        assert query.exception() is None
    finally:
        query.stop()


@pytest.mark.spark
def test_stateful_query_cannot_opt_in(spark, tmp_path):
    source, query = _start(spark, tmp_path, True, asyncProgressTrackingEnabled="true")
    try:
        source.add([{"id": 1, "k": "a"}])
        deadline = time.monotonic() + 40
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        error = query.exception()
    finally:
        query.stop()
    assert error is not None
    assert "Stateful streaming queries does not support async progress tracking" in str(error)


@pytest.mark.spark
def test_checkpoint_interval_must_stay_zero(spark, tmp_path):
    """An explicit non-zero asyncProgressTrackingCheckpointIntervalMs is refused at start()."""
    from pack_lab.rtm_probe import error_class

    with pytest.raises(Exception) as caught:
        _start(spark, tmp_path, False, asyncProgressTrackingCheckpointIntervalMs="1000")
    assert error_class(caught.value) == (
        "STREAMING_REAL_TIME_MODE.ASYNC_PROGRESS_TRACKING_CHECKPOINTING_INTERVAL_NON_ZERO")
