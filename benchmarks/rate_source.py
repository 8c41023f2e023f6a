"""How fast a real-time source keeps emitting over a run: the lab's rate source against LowLatencyMemoryStream.

The soak (``benchmarks/soak.py``) needs a source that holds its pace for 30 minutes. Spark's test
class ``LowLatencyMemoryStream`` (``pack_lab.rtm_lab.RealTimeMemorySource``) keeps every row it was
given on the driver and serves each to the task by an RPC call; the lab's rate source
(``pack_lab/jvm/RateSource.java``) computes each row from its id. Each source runs ``--seconds`` in
real-time mode (5 s trigger) at ``--rate`` rows/s into ``pack_lab.jvm.CountingWriter`` (a Java
``ForeachWriter`` that only counts, so no database sets the pace), one after the other in the same
local session. The memory source is fed by the soak's own feeder (``cluster_stream.Feeder``: rows
with ``sent_ms`` = now, 10 chunks a second). Printed and written per source: rows/s emitted in the
first and the second half of the run, the mean and max lag (arrival at the writer minus ``sent_ms``)
per half, and how far behind the due rows it was at the end. The second half must not be slower.

    nice -n 10 .venv/bin/python benchmarks/rate_source.py                     # 2 × 60 s at 5,000 rows/s
    .venv/bin/python benchmarks/rate_source.py --quick --out /tmp/rs.json    # 2 × 10 s: checks the script

Exit status 2 on bad arguments or environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "rate_source.json"
SOURCES = ("rate", "memory")
#: Second half's rate ÷ first half's at or above this counts as holding the pace.
HOLDS = 0.95


def say(message: str) -> None:
    print(f"[rate-source {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def counters(jvm) -> tuple[int, int, int]:
    w = jvm.pack_lab.jvm.CountingWriter
    return int(w.rows()), int(w.lagSumMs()), int(w.lagMaxMs())


def start_counting(df, checkpoint: str):
    jvm = df.sparkSession.sparkContext._jvm
    stream = df.writeStream
    stream._jwrite = stream._jwrite.foreach(jvm.pack_lab.jvm.CountingWriter())
    return (stream.outputMode("update").option("checkpointLocation", checkpoint)
            .trigger(realTime="5 seconds").start())


def run_source(spark, source: str, rate: int, seconds: float, workdir: str) -> dict[str, Any]:
    from pack_lab.cluster_stream import PAYLOAD, SCHEMA, Feeder, RatePlan
    from pack_lab.rate_source import rate_stream
    from pack_lab.rtm_lab import RealTimeMemorySource

    jvm = spark.sparkContext._jvm
    jvm.pack_lab.jvm.CountingWriter.reset()
    total = int(rate * seconds)
    feeder = None
    if source == "rate":
        plan = RatePlan.starting_soon(rate, seconds, lead_ms=3000)
        query = start_counting(rate_stream(spark, rate, total, plan.start_ms, payload=PAYLOAD),
                               os.path.join(workdir, "ck-rate"))
        t0 = plan.start_ms / 1000
        time.sleep(max(0.0, t0 - time.time()))
    else:
        memory = RealTimeMemorySource(spark, SCHEMA, num_partitions=1)
        query = start_counting(memory.dataframe(), os.path.join(workdir, "ck-memory"))
        time.sleep(3.0)  # the same lead as the rate source's: the query starts meanwhile
        feeder = Feeder([types.SimpleNamespace(source=memory)], rate, seconds)
        t0 = time.time()
        feeder.start()
    samples = []
    try:
        while time.time() - t0 < seconds:
            time.sleep(max(0.0, min(1.0, t0 + seconds - time.time())))
            rows, lag_sum, lag_max = counters(jvm)
            samples.append({"t_s": round(time.time() - t0, 2), "rows": rows, "lag_sum_ms": lag_sum,
                            "lag_max_ms": lag_max})
            if int(samples[-1]["t_s"]) % 10 == 0:
                say(f"{source}: {samples[-1]['t_s']:5.1f} s, {rows} rows emitted of {int(rate * samples[-1]['t_s'])} due")
            if not query.isActive:
                raise RuntimeError(f"the {source} query stopped: {query.exception()}")
        if feeder is not None and feeder.error is not None:
            raise RuntimeError(f"feeding the memory source failed: {feeder.error}")
    finally:
        if feeder is not None:
            feeder.halt.set()
        query.stop()
    return summarise(source, rate, seconds, samples)


def at(samples: list[dict[str, Any]], t: float) -> dict[str, Any]:
    """The last sample taken at or before ``t`` seconds."""
    before = [s for s in samples if s["t_s"] <= t + 0.05]
    return before[-1] if before else {"t_s": 0.0, "rows": 0, "lag_sum_ms": 0, "lag_max_ms": 0}


def summarise(source: str, rate: int, seconds: float, samples: list[dict[str, Any]]) -> dict[str, Any]:
    mid, end = at(samples, seconds / 2), samples[-1]
    zero = {"t_s": 0.0, "rows": 0, "lag_sum_ms": 0}

    def half(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        rows = b["rows"] - a["rows"]
        span = b["t_s"] - a["t_s"]
        return {"from_s": a["t_s"], "to_s": b["t_s"], "rows": rows,
                "rows_per_s": round(rows / span, 1) if span > 0 else None,
                "mean_lag_ms": round((b["lag_sum_ms"] - a["lag_sum_ms"]) / rows, 1) if rows else None}

    first, second = half(zero, mid), half(mid, end)
    ratio = (round(second["rows_per_s"] / first["rows_per_s"], 3)
             if first["rows_per_s"] and second["rows_per_s"] is not None else None)
    return {"source": source, "offered_rows_per_s": rate, "seconds": seconds,
            "first_half": first, "second_half": second, "second_over_first": ratio,
            "holds_pace": ratio is not None and ratio >= HOLDS,
            "behind_at_end_rows": int(rate * end["t_s"]) - end["rows"], "lag_max_ms": end["lag_max_ms"],
            "samples": samples}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=int, default=5000, help="rows/s offered to each source (default 5000)")
    p.add_argument("--seconds", type=float, default=60.0, help="run length per source (default 60)")
    p.add_argument("--sources", default=",".join(SOURCES), help="comma-separated, from rate,memory")
    p.add_argument("--quick", action="store_true", help="10 s per source at 1,000 rows/s: checks the script")
    p.add_argument("--out", default=str(DEFAULT_OUTPUT))
    args = p.parse_args(argv)
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    if not sources or any(s not in SOURCES for s in sources):
        p.error(f"--sources must name some of {','.join(SOURCES)}")
    if args.quick:
        args.rate, args.seconds = 1000, 10.0
    if args.rate < 1 or args.seconds < 4:
        p.error("--rate must be at least 1 and --seconds at least 4")
    import tempfile

    try:
        from pack_lab.rate_source import RateSourceUnavailable, rate_source_jars
        from pack_lab.rtm_lab import build_session

        try:
            jars = rate_source_jars()
        except RateSourceUnavailable as exc:
            say(str(exc))
            return 2
        jvm_log = os.path.join(tempfile.gettempdir(), f"rate-source-bench-{os.getpid()}-jvm.log")
        say(f"Spark's log: {jvm_log}")  # a stop interrupts the running task, which Spark logs at ERROR
        spark = build_session(cores=2, shuffle_partitions=1, jars=jars, app_name="rtm-rate-source-bench",
                              jvm_log=jvm_log)
        results = []
        load_before = os.getloadavg()
        try:
            with tempfile.TemporaryDirectory(prefix="rate-source-bench-") as work:
                for source in sources:
                    say(f"{source}: {args.rate} rows/s for {args.seconds:g} s")
                    results.append(run_source(spark, source, args.rate, args.seconds, work))
        finally:
            spark.stop()
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Exception as exc:
        say(f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return 2
    out = {"benchmark": "rate_source", "command": "benchmarks/rate_source.py " + " ".join(sys.argv[1:]),
           "settings": {"rate_rows_per_s": args.rate, "seconds": args.seconds, "trigger": "realTime 5 seconds",
                        "sink": "pack_lab.jvm.CountingWriter", "partitions": 1, "holds_pace_at": HOLDS},
           "machine": {"cpus": os.cpu_count(), "load_avg_before": [round(x, 2) for x in load_before],
                       "load_avg_after": [round(x, 2) for x in os.getloadavg()]},
           "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"{'source':8} {'offered/s':>9} {'1st half/s':>10} {'2nd half/s':>10} {'2nd/1st':>7} "
          f"{'lag 1st ms':>10} {'lag 2nd ms':>10} {'behind at end':>13}")
    for r in results:
        print(f"{r['source']:8} {r['offered_rows_per_s']:>9} {r['first_half']['rows_per_s']!s:>10} "
              f"{r['second_half']['rows_per_s']!s:>10} {r['second_over_first']!s:>7} "
              f"{r['first_half']['mean_lag_ms']!s:>10} {r['second_half']['mean_lag_ms']!s:>10} "
              f"{r['behind_at_end_rows']:>13}")
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
