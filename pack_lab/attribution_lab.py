"""Running the attribution query in the lab: sources, a tee writer, waits, and the state reader.

Used by ``tests/test_attribution.py``. Nothing here belongs in user code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pack_lab.file_sink import read_rows

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

#: The processor's state variables, as the state data source names them.
STATE_VARIABLES = ("request", "acks", "deadline")


class TeeWriter:
    """A ``foreach`` writer that hands every row to several writers (e.g. a file and Postgres)."""

    def __init__(self, *writers: Any):
        self.writers = writers

    def open(self, partition_id: int, epoch_id: int) -> bool:
        opened = []
        try:
            for writer in self.writers:
                if not writer.open(partition_id, epoch_id):
                    raise RuntimeError(f"{type(writer).__name__}.open() returned False")
                opened.append(writer)
        except BaseException as exc:
            for writer in opened:
                writer.close(exc)
            raise
        return True

    def process(self, row: Any) -> None:
        for writer in self.writers:
            writer.process(row)

    def close(self, error: BaseException | None) -> None:
        failure = None
        for writer in self.writers:
            try:
                writer.close(error)
            except BaseException as exc:  # close every writer, then report the first failure
                failure = failure or exc
        if failure is not None:
            raise failure


def sources(spark: SparkSession):
    """(requests, acks): one lab source per stream, one partition each."""
    from examples.ad_attribution import ACK_SCHEMA_DDL, REQUEST_SCHEMA_DDL
    from pack_lab.rtm_lab import RealTimeMemorySource

    return (RealTimeMemorySource(spark, REQUEST_SCHEMA_DDL),
            RealTimeMemorySource(spark, ACK_SCHEMA_DDL))


def input_rows(query: StreamingQuery) -> int:
    """Rows the query has taken in so far, by its progress reports."""
    return sum(p["numInputRows"] for p in query.recentProgress)


def input_batch_times(query: StreamingQuery) -> list[int]:
    """Start times (epoch ms) of the batches that took in rows, oldest first."""
    from datetime import datetime

    return [int(datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
            for p in query.recentProgress if p["numInputRows"] > 0]


def wait_until(predicate: Callable[[], bool], query: StreamingQuery, timeout: float,
               what: str, poll: float = 0.5) -> None:
    """Poll ``predicate()``; fail at once with the query's error if it dies."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if not query.isActive:
            raise AssertionError(f"query died while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; "
                                 f"last progress: {query.recentProgress[-2:]}")
        time.sleep(poll)


def wait_for_output(folder: str, query: StreamingQuery, count: int, timeout: float = 120.0,
                    keep: Callable[[Mapping[str, Any]], bool] = lambda r: True) -> list[dict]:
    """Until ``count`` kept rows are in the file sink; return them."""
    wait_until(lambda: sum(1 for r in read_rows(folder) if keep(r)) >= count, query, timeout,
               f"{count} output rows")
    return [r for r in read_rows(folder) if keep(r)]


def state_rows(spark: SparkSession, checkpoint: str) -> dict[str, int]:
    """Rows left in each state variable and in the timer index, read with the state data source."""
    counts = {}
    for name in STATE_VARIABLES:
        counts[name] = (spark.read.format("statestore").option("path", checkpoint)
                        .option("stateVarName", name).load().count())
    counts["timers"] = (spark.read.format("statestore").option("path", checkpoint)
                        .option("readRegisteredTimers", "true").load().count())
    return counts


def warm_up(requests, acks, folder: str, query: StreamingQuery, timeout: float = 180.0) -> None:
    """Send one matched pair (``transaction_id`` "warm-up") and wait for its row.

    The first batch of a Python ``transformWithState`` query starts its workers
    and can take half a minute; events fed before that would all be handled
    late, which shifts every attribution window.
    """
    requests.add([{"transaction_id": "warm-up", "request_id": "warm-up-r", "ad_id": "ad-0",
                   "event_ms": 0}])
    acks.add([{"transaction_id": "warm-up", "ack_id": "warm-up-a", "event_ms": 1}])
    wait_for_output(folder, query, 1, timeout, keep=lambda r: r["transaction_id"] == "warm-up")
