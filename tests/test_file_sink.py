"""The JSON-lines collecting writer: what it writes is what read_rows returns."""

import pickle

import pytest
from pyspark.sql import Row

from pack_lab.file_sink import JsonLinesForeachWriter, read_rows, wait_for_rows


def test_rows_round_trip_and_writer_pickles(tmp_path):
    writer = pickle.loads(pickle.dumps(JsonLinesForeachWriter(tmp_path, stamp_ms=True)))
    assert writer.open(0, 7) is True
    writer.process(Row(k="a", v=1))
    writer.process({"k": "b", "v": 2})
    writer.close(None)
    rows = read_rows(tmp_path)
    assert [(r["k"], r["v"]) for r in rows] == [("a", 1), ("b", 2)]
    assert all(isinstance(r["_sink_ms"], int) for r in rows)


def test_wait_for_rows_times_out(tmp_path):
    with pytest.raises(TimeoutError, match="only 0 of 1 rows"):
        wait_for_rows(tmp_path, 1, timeout=0.3, poll=0.1)


@pytest.mark.spark
def test_collects_real_time_output(spark, tmp_path):
    from pack_lab.rtm_lab import RealTimeMemorySource

    source = RealTimeMemorySource(spark, "id INT, name STRING")
    query = (source.dataframe().where("id % 2 = 0").writeStream
             .foreach(JsonLinesForeachWriter(tmp_path / "out"))
             .outputMode("update").trigger(realTime="5 seconds")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        source.add([{"id": i, "name": f"n{i}"} for i in range(6)])
        rows = wait_for_rows(tmp_path / "out", 3, timeout=60, query=query)
    finally:
        query.stop()
    assert sorted(r["id"] for r in rows) == [0, 2, 4]
