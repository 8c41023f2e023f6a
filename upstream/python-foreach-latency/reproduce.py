"""Reproducer: how long a row waits before a Python foreach writer's process() sees it.

Runs a real-time-mode query (open-source Spark 4.1+) on Spark's in-memory
real-time source, feeds rows at a steady rate, and prints, per row, the time
from ``addData`` to ``process()`` (p50/p99/max) and the batch sizes the Python
worker received (rows that reached ``process()`` less than 1 ms apart)::

    python reproduce.py                 # stock writeStream.foreach: seconds
    python reproduce.py --fast          # the same policy as the patch, through the pack's
                                        # rtm_lakebase.foreach (needs its jar on spark.jars)

On a Spark build with python-foreach-available-rows.patch applied, the stock
run gives the --fast figures. Needs only pyspark (and, for --fast, this repository).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


class StampWriter:
    """Appends "sent_ms seen_ms" per row to a file (one file per task)."""

    def __init__(self, folder: str):
        self.folder = folder

    def open(self, partition_id, epoch_id):
        self.out = open(os.path.join(self.folder, f"{partition_id}-{epoch_id}-{os.getpid()}.txt"), "a")
        return True

    def process(self, row):
        self.out.write(f"{row.sent_ms} {time.time() * 1000:.1f}\n")
        self.out.flush()

    def close(self, error):
        self.out.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(round(q / 100 * len(ordered) + 0.5)) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", action="store_true", help="use rtm_lakebase.foreach.start_foreach_query")
    parser.add_argument("--rate", type=int, default=50, help="rows per second (default 50)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of input (default 20)")
    args = parser.parse_args()

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    jars = []
    if args.fast:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from rtm_lakebase.foreach import foreach_jars, start_foreach_query

        jars = foreach_jars()
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    factory = getattr(getattr(jvm, "org.apache.spark.sql.execution.streaming.sources.LowLatencyMemoryStream$"), "MODULE$")
    stream = factory.apply(spark._jsparkSession, 1, jvm.org.apache.spark.sql.Encoders.STRING())
    df = DataFrame(stream.toDF(), spark).select(F.col("value").cast("long").alias("sent_ms"))
    folder = tempfile.mkdtemp(prefix="foreach-repro-")
    checkpoint = tempfile.mkdtemp(prefix="foreach-repro-ck-")
    writer = StampWriter(folder)
    if args.fast:
        query = start_foreach_query(df, writer, checkpoint_location=checkpoint, trigger={"realTime": "10 seconds"})
    else:
        stream_writer = df.writeStream.foreach(writer).outputMode("update").option("checkpointLocation", checkpoint)
        trigger = jvm.org.apache.spark.sql.streaming.Trigger.RealTime("10 seconds")
        stream_writer._jwrite = stream_writer._jwrite.trigger(trigger)  # works with or without realTime=
        query = stream_writer.start()
    seq = jvm.scala.collection.immutable.ArraySeq

    def add(text: str) -> None:
        stream.addData(seq.unsafeWrapArray(jvm.org.apache.commons.lang3.StringUtils.split(text, "\n")))

    def lines() -> list[tuple[float, float]]:
        return [tuple(map(float, line.split())) for p in Path(folder).glob("*.txt")
                for line in p.read_text().splitlines() if line.strip()]

    # Warm-up row (sent_ms 0, left out): the first task and its Python worker start before timing.
    add("0")
    deadline = time.monotonic() + 60
    while not lines() and time.monotonic() < deadline:
        if not query.isActive:
            raise SystemExit(f"the query stopped: {query.exception()}")
        time.sleep(0.1)
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        add(str(int(time.time() * 1000)))
        sent += 1
        time.sleep(max(0.0, start + sent / args.rate - time.monotonic()))
    deadline = time.monotonic() + 30
    seen: list[tuple[float, float]] = []
    while time.monotonic() < deadline:
        seen = [(t, s) for t, s in lines() if t > 0]
        if len(seen) >= sent:
            break
        time.sleep(0.2)
    query.stop()
    spark.stop()
    waits = [s - t for t, s in seen]
    arrivals = sorted(s for _, s in seen)
    batches, size = [], 1
    for before, after in zip(arrivals, arrivals[1:], strict=False):
        if after - before < 1.0:
            size += 1
        else:
            batches.append(size)
            size = 1
    batches.append(size)
    label = "rows batched by availability (--fast)" if args.fast else "stock writeStream.foreach"
    print(f"{label}: {len(seen)}/{sent} rows at {args.rate} rows/s; addData -> process(): "
          f"p50 {pct(waits, 50):.0f} ms, p99 {pct(waits, 99):.0f} ms, max {max(waits):.0f} ms; "
          f"largest burst reaching process() together: {max(batches)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
