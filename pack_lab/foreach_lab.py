"""Scenarios that compare the fast foreach path (``rtm_lakebase.foreach``) with stock ``foreach``.

Each scenario runs one streaming query through either path (``"stock"``:
``writeStream.foreach(writer)``; ``"fast"``: ``start_foreach_query``) with a
:class:`RecordingWriter` that appends every ``open``/``process``/``close`` call
to a per-task JSON-lines file, and returns what happened as plain data, so a
test can assert the two paths behave the same. The tests on the pinned PySpark
call the scenarios directly; ``python -m pack_lab.foreach_lab --run OUT.json``
runs them all under whatever PySpark the interpreter has (the per-version tests
run it in ``.cache/pyspark-<version>/``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = "id BIGINT"
TRIGGER = "5 seconds"
PATHS = ("stock", "fast")


class RecordingWriter:
    """A foreach writer that records its calls; optionally raises or kills its worker at one id.

    Picklable: only the folder and the two ids travel to the executors.
    """

    def __init__(self, folder: str, raise_on: int | None = None, kill_on: int | None = None):
        self.folder = folder
        self.raise_on = raise_on
        self.kill_on = kill_on
        self._file = None
        self._epoch = None

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "raise_on": self.raise_on, "kill_on": self.kill_on}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)

    def _write(self, **event: Any) -> None:
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def open(self, partition_id: int, epoch_id: int) -> bool:
        name = f"{partition_id}-{epoch_id}-{uuid.uuid4().hex[:8]}.jsonl"
        self._file = open(os.path.join(self.folder, name), "a", encoding="utf-8")
        self._epoch = epoch_id
        self._write(event="open", partition=partition_id, epoch=epoch_id, pid=os.getpid())
        return True

    def process(self, row) -> None:
        self._write(event="row", id=row.id, epoch=self._epoch, t=time.time())
        if self.raise_on is not None and row.id == self.raise_on:
            raise ValueError(f"boom on row {row.id}")
        if self.kill_on is not None and row.id == self.kill_on:
            os.kill(os.getpid(), 9)

    def close(self, error) -> None:
        self._write(event="close", epoch=self._epoch, error=None if error is None else repr(error))
        self._file.close()


#: How a task's exception line reads in a query's message: "(TID 5) (host executor driver): java.lang.X: text".
_TASK_FAILURE = re.compile(r"\(TID \d+\) \([^)]*\): ([\w.$]+)(?:: ([^\n]*))?")
_CAUSED_BY = re.compile(r"^Caused by: ([\w.$]+)(?:: ([^\n]*))?", re.MULTILINE)
#: Exceptions an interrupt produces in whatever the task thread was doing (a source's sleep, an RPC wait, IO).
INTERRUPTIONS = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                 "java.nio.channels.ClosedByInterruptException")


def _kind(cls: str, text: str | None) -> str:
    text = text or ""
    found = re.match(r"\[[A-Z_.]+\]", text)
    if found:
        return found.group(0)
    if "Python worker exited unexpectedly" in text:
        return "Python worker exited unexpectedly"
    return cls


def reported_error(message: str) -> tuple[str, str]:
    """How a failed query's message names the task's error: ``(how, kind)``.

    ``kind`` is the error class (``[FOREACH_USER_FUNCTION_ERROR]``, ``[PYTHON_EXCEPTION]``),
    ``"Python worker exited unexpectedly"`` for a crashed worker, else the exception's class.
    ``how`` is ``"error"`` when the task failed with that error, ``"cause"`` when it failed with an
    interrupt's exception (the fast path's fail-fast interrupt, thrown by the source the task was
    waiting in) whose cause is that error, ``"interrupt"`` when it failed with an interrupt and no cause
    names anything else (the worker's error at best a suppressed one: the defect this guards against).
    """
    head = re.search(r"terminated with exception: (\[[A-Z_.]+\])", message)
    if head:
        return "error", head.group(1)
    task = _TASK_FAILURE.search(message)
    if not task:
        return "error", message.splitlines()[0][:200] if message else ""
    if task.group(1) not in INTERRUPTIONS:
        return "error", _kind(task.group(1), task.group(2))
    cause = _CAUSED_BY.search(message, task.end())
    if cause and cause.group(1) not in INTERRUPTIONS:
        return "cause", _kind(cause.group(1), cause.group(2))
    return "interrupt", task.group(1)


def read_events(folder: str | Path) -> list[dict[str, Any]]:
    events = []
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                events.append(json.loads(line))
    return events


def start(path: str, df, writer, checkpoint: str, trigger: dict[str, Any] | None = None, **fast_options):
    """Start ``df`` into ``writer`` through the stock or the fast foreach path."""
    trigger = trigger or {"realTime": TRIGGER}
    if path == "fast":
        from rtm_lakebase.foreach import start_foreach_query

        return start_foreach_query(df, writer, checkpoint_location=checkpoint, trigger=trigger, **fast_options)
    if path != "stock":
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    return (df.writeStream.foreach(writer).outputMode("update").trigger(**trigger)
            .option("checkpointLocation", checkpoint).start())


def _wait(predicate: Callable[[], Any], query, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if not query.isActive:
            raise AssertionError(f"query stopped before {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def _seen_ids(folder: str) -> list[int]:
    return [e["id"] for e in read_events(folder) if e["event"] == "row"]


def deliver_all(spark, path: str, work: str, chunks: list[int], *, trickle: int = 0,
                **fast_options) -> dict[str, Any]:
    """Feed ``chunks`` (row counts, added back to back), then ``trickle`` rows one at a time,
    each added only after the previous one reached ``process()``; return what each epoch saw."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    folder = tempfile.mkdtemp(dir=work, prefix="events-")
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    query = start(path, source.dataframe(), RecordingWriter(folder), os.path.join(work, "ck-" + uuid.uuid4().hex),
                  **fast_options)
    try:
        total = 0
        for n in chunks:
            source.add([{"id": total + i} for i in range(n)])
            total += n
        _wait(lambda: len(_seen_ids(folder)) >= total, query, 120, f"{total} rows")
        trickle_epochs = []
        for _ in range(trickle):
            source.add([{"id": total}])
            want = total
            _wait(lambda want=want: want in _seen_ids(folder), query, 60, f"row {want}")
            trickle_epochs.append(next(e["epoch"] for e in read_events(folder)
                                       if e["event"] == "row" and e["id"] == want))
            total += 1
    finally:
        query.stop()
    rows = [e for e in read_events(folder) if e["event"] == "row"]
    by_epoch: dict[int, list[int]] = {}
    for e in rows:
        by_epoch.setdefault(e["epoch"], []).append(e["id"])
    return {"sent": total, "ids": sorted(e["id"] for e in rows),
            "epoch_duplicates": {str(k): len(v) - len(set(v)) for k, v in by_epoch.items()},
            "trickle_epochs": trickle_epochs}


def failing_query(spark, path: str, work: str, *, raise_on: int | None = None,
                  kill_on: int | None = None, rows: int = 20) -> dict[str, Any]:
    """Feed ``rows`` rows to a writer that raises (or kills its worker) at one id; return how it ended."""
    from pack_lab.rtm_lab import RealTimeMemorySource

    folder = tempfile.mkdtemp(dir=work, prefix="events-")
    source = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
    writer = RecordingWriter(folder, raise_on=raise_on, kill_on=kill_on)
    query = start(path, source.dataframe(), writer, os.path.join(work, "ck-" + uuid.uuid4().hex))
    error = None
    try:
        source.add([{"id": i} for i in range(rows)])
        try:
            query.awaitTermination(120)
        except Exception as exc:  # StreamingQueryException: the task's error
            error = str(exc)
    finally:
        query.stop()
    if error is None and query.exception() is not None:
        error = str(query.exception())
    events = read_events(folder)
    return {"query_error": error,
            "close_errors": [e["error"] for e in events if e["event"] == "close"],
            "rows_seen": sorted(e["id"] for e in events if e["event"] == "row")}


def run_all(work: str) -> dict[str, Any]:
    """Every scenario on both paths under this interpreter's PySpark (for the per-version tests)."""
    import pyspark
    from pyspark.sql import SparkSession

    from pack_lab.rtm_lab import LabConfig, session_conf
    from pack_lab.support_matrix import install_version_shims
    from rtm_lakebase.foreach import foreach_jars

    used = install_version_shims()
    builder = SparkSession.builder
    conf = session_conf(LabConfig(cores=2, shuffle_partitions=1, app_name="fast-foreach-versions",
                                  jars=foreach_jars()))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    out: dict[str, Any] = {"spark_version": spark.version, "pyspark": pyspark.__version__, **used}
    try:
        for path in PATHS:
            out[path] = {
                "deliver": deliver_all(spark, path, work, [1, 300, 1, 1200], trickle=2 if path == "fast" else 0,
                                       **({"worker_batch_rows": 7} if path == "fast" else {})),
                "raise": failing_query(spark, path, work, raise_on=7),
                "kill": failing_query(spark, path, work, kill_on=5),
            }
            print(f"[foreach-lab] {path}: done", file=sys.stderr, flush=True)
    finally:
        spark.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--run":
        print("usage: python -m pack_lab.foreach_lab --run OUT.json", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="foreach-lab-") as work:
        result = run_all(work)
    Path(args[1]).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
