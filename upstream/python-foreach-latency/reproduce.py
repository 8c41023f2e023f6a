"""Reproducer: how long a row waits before a Python foreach writer's process() sees it.

Runs a real-time-mode query (open-source Spark 4.1+) on Spark's in-memory
real-time source, feeds rows at a steady rate, and prints, per row, the time
from ``addData`` to ``process()`` (p50/p99/max) and the batch sizes the Python
worker received (rows that reached ``process()`` less than 1 ms apart)::

    python reproduce.py                 # stock writeStream.foreach: seconds
    python reproduce.py --fast          # the same policy as the patch, through the pack's
                                        # rtm_lakebase.foreach (needs its jar on spark.jars)
    python reproduce.py --spark-classes DIR   # stock foreach on a Spark whose PythonForeachWriter
                                              # is the patched one (compile_patch.py --out DIR → DIR/patched)
    python reproduce.py --lone-row [--spark-classes DIR]
        # exit 0 if each of two rows added one at a time reaches process() while the 5-minute
        # long batch runs and no later row comes (the patch's behaviour); 1 if one does not
        # within --wait seconds (stock 4.3.0)

On a Spark build with python-foreach-available-rows.patch applied, the stock
run gives the --fast figures. Needs only pyspark (and, for --fast, this repository).
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--spark-classes", metavar="DIR",
                        help="put these classes ahead of Spark's own (e.g. the patched PythonForeachWriter "
                             "built by compile_patch.py) on the driver's class path")
    parser.add_argument("--lone-row", action="store_true",
                        help="check that lone rows reach process() before the long batch ends")
    parser.add_argument("--wait", type=float, default=60.0,
                        help="--lone-row: seconds to wait for the row (default 60; the long batch is 5 minutes)")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
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
    if args.spark_classes:
        builder = builder.config("spark.driver.extraClassPath", str(Path(args.spark_classes).resolve()))
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
        trigger = jvm.org.apache.spark.sql.streaming.Trigger.RealTime("5 minutes" if args.lone_row else "10 seconds")
        stream_writer._jwrite = stream_writer._jwrite.trigger(trigger)  # works with or without realTime=
        query = stream_writer.start()
    seq = jvm.scala.collection.immutable.ArraySeq

    def add(text: str) -> None:
        stream.addData(seq.unsafeWrapArray(jvm.org.apache.commons.lang3.StringUtils.split(text, "\n")))

    def lines() -> list[tuple[float, float]]:
        return [tuple(map(float, line.split())) for p in Path(folder).glob("*.txt")
                for line in p.read_text().splitlines() if line.strip()]

    if args.lone_row:
        return lone_rows(add, lines, query, spark, args.wait)
    # Warm-up row (sent_ms 0, left out): the first task and its Python worker start before timing.
    add("0")
    deadline = time.monotonic() + 120
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
    label = ("rows batched by availability (--fast)" if args.fast
             else "writeStream.foreach on the patched PythonForeachWriter" if args.spark_classes
             else "stock writeStream.foreach")
    print(f"{label}: {len(seen)}/{sent} rows at {args.rate} rows/s; addData -> process(): "
          f"p50 {pct(waits, 50):.0f} ms, p99 {pct(waits, 99):.0f} ms, max {max(waits):.0f} ms; "
          f"largest burst reaching process() together: {max(batches)} rows")
    if args.json:
        load = os.getloadavg()
        args.json.write_text(json.dumps({
            "run": label, "rate_rows_per_s": args.rate, "seconds": args.seconds, "rows_sent": sent,
            "rows_seen": len(seen), "trigger": "RealTime 10 seconds", "master": "local[2]",
            "adddata_to_process_ms": {"p50": round(pct(waits, 50), 1), "p99": round(pct(waits, 99), 1),
                                      "max": round(max(waits), 1)},
            "largest_burst_rows": max(batches), "load_average_1m_at_end": round(load[0], 2),
        }, indent=2) + "\n", encoding="utf-8")
    return 0


def lone_rows(add, lines, query, spark, wait_s: float) -> int:
    """Add one row, wait up to ``wait_s`` for process() to see it, then the same for a second row.

    Stock Spark 4.3.0 holds both until more rows come or the 5-minute long batch ends: the first in
    the runner's 64 KB output buffer, the second also in the pickler, whose second batch wants two
    rows. The patched writer sends each alone.
    """
    try:
        for number in (1, 2):
            sent = int(time.time() * 1000)
            add(str(sent))
            deadline = time.monotonic() + wait_s
            seen: list[float] = []
            while not seen and time.monotonic() < deadline and query.isActive:
                seen = [s for t, s in lines() if t == sent]
                time.sleep(0.1)
            if not seen:
                print(f"lone row {number} did not reach process() within {wait_s:.0f} s "
                      "(no later row was added; the 5-minute long batch was still running)")
                return 1
            print(f"lone row {number} reached process() {seen[0] - sent:.0f} ms after addData "
                  "(no later row was added; the long batch was still running)")
        return 0
    finally:
        query.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
