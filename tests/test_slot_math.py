"""The sizing calculator: arithmetic, input checks, and one real RTM run that proves its prediction."""

from __future__ import annotations

import pytest

from rtm_lakebase.calc.sizing import (
    QueryShape,
    check_local,
    kafka_source_tasks,
    kafka_tradeoff,
    plan_cluster,
    stateful_query,
)


def test_required_slots_sum_every_stage():
    assert QueryShape(3).required_slots == 3
    assert QueryShape(3, (2,)).required_slots == 5
    assert QueryShape(16, (8, 4)).required_slots == 28
    assert stateful_query(16, 8).required_slots == 24
    assert stateful_query(16, 8, exchanges=2).required_slots == 32
    assert stateful_query(5, 8, exchanges=0).required_slots == 5


def test_shape_normalises_a_list_of_stages():
    assert QueryShape(2, [3, 4]).shuffle_stages == (3, 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"source_tasks": 0}, "source_tasks must be at least 1"),
    ({"source_tasks": 2.0}, "source_tasks must be an integer"),
    ({"source_tasks": True}, "source_tasks must be an integer"),
    ({"source_tasks": 2, "shuffle_stages": (2, 0)}, r"shuffle_stages\[1\] must be at least 1"),
    ({"source_tasks": 2, "shuffle_stages": "8"}, "shuffle_stages must be a sequence"),
    ({"source_tasks": 2, "shuffle_stages": 8}, "shuffle_stages must be a sequence"),
])
def test_shape_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        QueryShape(**kwargs)


def test_stateful_query_rejects_bad_input():
    with pytest.raises(ValueError, match="shuffle_partitions must be at least 1"):
        stateful_query(2, 0)
    with pytest.raises(ValueError, match="exchanges must be at least 0"):
        stateful_query(2, 2, exchanges=-1)


def test_plan_cluster_headroom():
    shape = stateful_query(16, 8)  # 24 slots
    hard = plan_cluster(shape, cores_per_worker=8, target_utilisation=1.0)
    assert (hard.workers, hard.total_slots, hard.utilisation) == (3, 24, 1.0)
    half = plan_cluster(shape, cores_per_worker=8)  # 50 % by default
    assert (half.workers, half.total_slots, half.utilisation) == (6, 48, 0.5)
    odd = plan_cluster(QueryShape(5), cores_per_worker=4, target_utilisation=0.5)
    assert (odd.workers, odd.total_slots) == (3, 12)  # 10 slots wanted, rounded up to whole workers
    assert odd.utilisation <= 0.5


@pytest.mark.parametrize("cores, target, match", [
    (0, 0.5, "cores_per_worker must be at least 1"),
    (8, 0, r"target_utilisation must be in \(0, 1\]"),
    (8, 1.5, r"target_utilisation must be in \(0, 1\]"),
    (8, "50%", "target_utilisation must be a number"),
])
def test_plan_cluster_rejects_bad_input(cores, target, match):
    with pytest.raises(ValueError, match=match):
        plan_cluster(QueryShape(2), cores_per_worker=cores, target_utilisation=target)


def test_kafka_max_partitions_tradeoff():
    assert kafka_source_tasks(16) == 16
    assert kafka_source_tasks(16, 4) == 4
    assert kafka_source_tasks(3, 8) == 3  # never more tasks than topic partitions
    options = kafka_tradeoff(16, (8,), choices=(None, 8, 5))
    assert [(o.source_tasks, o.topic_partitions_per_task, o.required_slots) for o in options] == [
        (16, 1, 24), (8, 2, 16), (5, 4, 13)]
    with pytest.raises(ValueError, match="max_partitions must be at least 1"):
        kafka_source_tasks(16, 0)
    with pytest.raises(ValueError, match="topic_partitions must be at least 1"):
        kafka_source_tasks(0)


def test_local_check_messages():
    fits = check_local(stateful_query(2, 2), 4)
    assert fits.fits and fits.shortfall == 0 and "can be scheduled" in fits.message()
    short = check_local(stateful_query(2, 4), 4)
    assert not short.fits and short.shortfall == 2
    assert "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT" in short.message()
    assert "local[6]" in short.message()
    with pytest.raises(ValueError, match="local_cores must be at least 1"):
        check_local(QueryShape(1), 0)


@pytest.mark.spark
@pytest.mark.parametrize("shuffle_partitions", [2, 4])
def test_prediction_matches_a_real_rtm_run(spark, tmp_path, shuffle_partitions):
    """A 2-partition source + groupBy: predicted to fit on local[4] with 2 shuffle partitions, not with 4."""
    from pack_lab.file_sink import JsonLinesForeachWriter, read_rows
    from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource, local_cores
    from pack_lab.rtm_probe import run_and_classify

    verdict = check_local(stateful_query(2, shuffle_partitions), local_cores(spark))
    assert verdict.local_cores == 4

    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    source = RealTimeMemorySource(spark, "k STRING", num_partitions=2)
    out = tmp_path / "out"

    def counts() -> dict:
        latest: dict = {}
        for row in read_rows(out):
            latest[row["k"]] = max(latest.get(row["k"], 0), row["count"])
        return latest

    outcome = run_and_classify(
        start=lambda: (source.dataframe().groupBy("k").count().writeStream
                       .foreach(JsonLinesForeachWriter(out)).outputMode("update")
                       .trigger(realTime=MIN_REAL_TIME_TRIGGER)
                       .option("checkpointLocation", str(tmp_path / "ck")).start()),
        feed=lambda _q: source.add([{"k": k} for k in "xyxzx"]),
        until=lambda: counts() == {"x": 3, "y": 1, "z": 1},
        timeout=45,
    )
    if verdict.fits:
        assert outcome.status == "accepted", outcome
    else:
        assert outcome.status == "rejected", outcome
        assert outcome.error_class == "CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT", outcome
        assert outcome.stage == "run"


def test_worked_examples_of_the_reference():
    """The numbers in references/real-time-mode.md's worked-examples table."""
    def workers(shape):
        return (plan_cluster(shape, 8, 1.0).workers, plan_cluster(shape, 8, 0.5).workers)

    assert (QueryShape(16).required_slots, workers(QueryShape(16))) == (16, (2, 4))
    assert (stateful_query(16, 8).required_slots, workers(stateful_query(16, 8))) == (24, (3, 6))
    with_8 = QueryShape(kafka_source_tasks(16, 8), (8,))
    assert (with_8.required_slots, workers(with_8)) == (16, (2, 4))
    with_4 = QueryShape(kafka_source_tasks(16, 4), (8,))
    assert (with_4.required_slots, workers(with_4)) == (12, (2, 3))
    two_exchanges = QueryShape(16, (8, 8))
    assert (two_exchanges.required_slots, workers(two_exchanges)) == (32, (4, 8))
    assert check_local(stateful_query(2, 2), 4).fits
    assert not check_local(stateful_query(2, 4), 4).fits
