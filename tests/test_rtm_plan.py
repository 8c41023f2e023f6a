"""Where the RealTimeStreamScan node shows: in a running real-time query's plan, not before start()."""

from __future__ import annotations

import contextlib
import io

import pytest

from pack_lab.file_sink import JsonLinesForeachWriter, wait_for_rows
from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER, RealTimeMemorySource


def _running_plan(query) -> str:
    return query._jsq.explainInternal(False)  # what query.explain() prints


@pytest.mark.spark
@pytest.mark.parametrize("real_time, node", [(True, "RealTimeStreamScan"), (False, "MicroBatchScan")],
                         ids=["real-time", "micro-batch"])
def test_scan_node_of_a_running_query(spark, tmp_path, real_time, node):
    source = RealTimeMemorySource(spark, "id INT, k STRING")
    df = source.dataframe().select("id")
    before = io.StringIO()
    with contextlib.redirect_stdout(before):
        df.explain()
    # Before start() the DataFrame's plan names no execution mode at all.
    assert "RealTimeStreamScan" not in before.getvalue()
    writer = (df.writeStream.foreach(JsonLinesForeachWriter(tmp_path / "out")).outputMode("update")
              .option("checkpointLocation", str(tmp_path / "ck")))
    writer = (writer.trigger(realTime=MIN_REAL_TIME_TRIGGER) if real_time
              else writer.trigger(processingTime="1 second"))
    query = writer.start()
    try:
        source.add([{"id": 1, "k": "a"}])
        wait_for_rows(tmp_path / "out", 1, timeout=40, query=query)
        plan = _running_plan(query)
    finally:
        query.stop()
    assert node in plan
    if not real_time:
        assert "RealTimeStreamScan" not in plan
