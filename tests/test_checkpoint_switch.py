"""Switching a query from micro-batch to real-time mode on the same checkpoint (open-source 4.3).

The session default for ``spark.sql.streaming.stateStore.checkpointFormatVersion``
is 1, and real-time mode refuses a checkpoint whose committed batches were written
in format 1: with the RocksDB state store (the lab session sets it, as the pack
advises) and with Spark's default HDFS-backed store alike, stateless queries too.
With format 2 set before the first micro-batch run, the same checkpoint switches
to real-time mode and a stateful query keeps its state. Every case waits for the
micro-batch run's first commit: a run stopped before it leaves a checkpoint with
nothing committed, and the real-time run then simply starts over. SKILL.md rule
10 states this.
"""

from __future__ import annotations

import time

import pytest

from pack_lab.file_sink import JsonLinesForeachWriter, read_rows, wait_for_rows
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource
from pack_lab.rtm_probe import run_and_classify

FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


@pytest.fixture
def checkpoint_format(spark):
    """Set the format (or ``None``: leave the default); the lab session never sets it, so unset after."""

    def use(version: str | None) -> None:
        if version is None:
            spark.conf.unset(FORMAT)
        else:
            spark.conf.set(FORMAT, version)

    yield use
    spark.conf.unset(FORMAT)


def _batches(folder) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.isdigit()} if folder.is_dir() else set()


def _wait_for_commit(checkpoint, query, timeout: float = 120) -> None:
    """Until every batch the micro-batch run has started is committed (the one that wrote the row
    included: an earlier, empty batch may have committed first), or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started, committed = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
        if started and started <= committed:
            return
        if query.exception() is not None:
            raise AssertionError(f"the micro-batch run failed: {query.exception()}")
        time.sleep(0.2)
    raise AssertionError(f"no committed micro-batch in {timeout:.0f} s")


def _micro_batch_then_real_time(spark, tmp_path, stateful: bool):
    source = RealTimeMemorySource(spark, "id INT, k STRING")
    df = source.dataframe()
    df = df.groupBy("k").count() if stateful else df.select("id")
    checkpoint = str(tmp_path / "ck")
    first = (df.writeStream.foreach(JsonLinesForeachWriter(tmp_path / "mb")).outputMode("update")
             .trigger(processingTime="1 second").option("checkpointLocation", checkpoint).start())
    try:
        source.add([{"id": 1, "k": "a"}])
        wait_for_rows(tmp_path / "mb", 1, timeout=120, query=first)
        _wait_for_commit(tmp_path / "ck", first)  # the outcome depends on a committed batch: wait for it
    finally:
        first.stop()
    writer = (df.writeStream.foreach(JsonLinesForeachWriter(tmp_path / "rt")).outputMode("update")
              .trigger(realTime=MIN_REAL_TIME_TRIGGER).option("checkpointLocation", checkpoint))
    outcome = run_and_classify(start=writer.start, feed=lambda _q: source.add([{"id": 2, "k": "a"}]),
                               until=lambda: len(read_rows(tmp_path / "rt")) >= 1, timeout=40)
    return outcome, read_rows(tmp_path / "rt")


@pytest.fixture
def state_store_settings(spark):
    """Unset some of the lab's RocksDB settings for one test (unset = Spark's default); restored after."""
    saved = {key: spark.conf.get(key) for key in (PROVIDER, CHANGELOG)}
    assert saved[PROVIDER] == ROCKSDB  # what the other tests here run on

    def unset(*keys: str) -> None:
        for key in keys:
            spark.conf.unset(key)

    yield unset
    for key, value in saved.items():
        spark.conf.set(key, value)


@pytest.mark.spark
def test_default_format_is_one(spark):
    assert spark.conf.get(FORMAT) == "1"


@pytest.mark.spark
def test_explicit_format_one_is_refused_at_start(spark, tmp_path, checkpoint_format):
    """Set explicitly, format 1 is a refused SQL setting for a real-time query, before any checkpoint."""
    checkpoint_format("1")
    source = RealTimeMemorySource(spark, "id INT, k STRING")
    writer = (source.dataframe().groupBy("k").count().writeStream
              .foreach(JsonLinesForeachWriter(tmp_path / "out")).outputMode("update")
              .trigger(realTime=MIN_REAL_TIME_TRIGGER).option("checkpointLocation", str(tmp_path / "ck")))
    outcome = run_and_classify(start=writer.start, timeout=60)
    assert outcome.error_class == "STREAMING_REAL_TIME_MODE.SQL_CONFIGURATION_NOT_SUPPORTED"


@pytest.mark.spark
@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_default_format_checkpoint_is_refused(spark, tmp_path, checkpoint_format, stateful):
    checkpoint_format(None)  # the default, 1, for both runs
    assert spark.conf.get(PROVIDER) == ROCKSDB  # the lab's settings; the HDFS-backed case is the next test
    outcome, rows = _micro_batch_then_real_time(spark, tmp_path, stateful)
    assert outcome.error_class == "STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED"
    assert outcome.stage == "run"
    assert rows == []


@pytest.mark.spark
@pytest.mark.slow
def test_default_hdfs_state_store_checkpoint_is_refused_too(spark, tmp_path, checkpoint_format,
                                                            state_store_settings):
    """Spark's default state store settings (HDFS-backed: no provider class, no RocksDB changelog setting)
    and the default format 1: once the micro-batch run has committed a batch, the switch is refused
    exactly as with RocksDB. (A run that is stopped before its first commit leaves nothing to refuse: the
    real-time run then starts over and replays the rows, which can look like a switch that worked.)"""
    checkpoint_format(None)
    state_store_settings(PROVIDER, CHANGELOG)
    assert "HDFSBackedStateStoreProvider" in spark.conf.get(PROVIDER)
    outcome, rows = _micro_batch_then_real_time(spark, tmp_path, stateful=True)
    assert outcome.error_class == "STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED"
    assert outcome.stage == "run"
    assert rows == []


@pytest.mark.spark
@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_format_two_checkpoint_switches_and_keeps_state(spark, tmp_path, checkpoint_format, stateful):
    checkpoint_format("2")
    outcome, rows = _micro_batch_then_real_time(spark, tmp_path, stateful)
    assert outcome.status == "accepted", (outcome.error_class, outcome.message)
    # The second run resumes after the first: the micro-batch row is not replayed and a
    # stateful count continues from the micro-batch run's state.
    assert rows == ([{"k": "a", "count": 2}] if stateful else [{"id": 2}])
