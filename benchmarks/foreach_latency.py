"""Benchmark: per-row latency of a Python ``foreach`` sink under open-source real-time mode.

Every case feeds the lab's RTM-capable memory source at a steady rate, stamps
each row at the source, inside the JVM plan and in the sink (see
``pack_lab/latency_probe.py``) and reports p50/p95/p99/max per leg:

* RTM with a 10 s trigger at several input rates, and micro-batch
  (``processingTime="0 seconds"``) on the same source as the comparison;
* mitigations, each measured: a 5 s trigger, padded rows (pickled batches
  reach the 1 MB mark sooner), a small ``spark.buffer.size`` (the Python
  runner's send buffer), ``spark.python.worker.reuse=false``, and a JVM
  ``ForeachWriter`` (compiled here with ``javac``; skipped if there is none).

Session-level settings (``spark.buffer.size``, worker reuse, the JVM writer's
class path) need their own SparkSession, so each group of cases runs in a
child process. Run::

    .venv/bin/python benchmarks/foreach_latency.py            # full run, ~6 min
    .venv/bin/python benchmarks/foreach_latency.py --quick    # smoke run, ~30 s
    .venv/bin/python benchmarks/foreach_latency.py --update-readme

Results go to ``benchmarks/results/foreach_latency.json`` and a table is printed.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "foreach_latency.json"
README = ROOT / "benchmarks" / "README.md"
#: Markers of the results table in benchmarks/README.md and references/real-time-mode.md; the block is
#: written by `scripts/skills.py generate` (generator "foreach-latency" renders :func:`markdown_table`).
README_START = "<!-- generated:foreach-latency -->"
README_END = "<!-- /generated:foreach-latency -->"

#: Task slots for the benchmark session: one source partition, stateless query.
CORES = 2

JVM_WRITER_CLASS = "PackLatencyJvmWriter"
JVM_WRITER_SOURCE = """
import java.io.*;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;

public class PackLatencyJvmWriter extends ForeachWriter<Row> {
  private final String folder;
  private transient Writer out;

  public PackLatencyJvmWriter(String folder) { this.folder = folder; }

  @Override public boolean open(long partitionId, long epochId) {
    try {
      new File(folder).mkdirs();
      String name = "lat-" + partitionId + "-" + epochId + "-"
          + java.util.UUID.randomUUID().toString().substring(0, 8) + ".csv";
      out = new BufferedWriter(new FileWriter(new File(folder, name), true));
      return true;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override public void process(Row row) {
    long sink = System.currentTimeMillis();
    Object source = row.getAs("source_ms");
    Object plan = row.getAs("plan_ms");
    try {
      out.write((source == null ? "" : source.toString()) + ","
          + (plan == null ? "" : plan.toString()) + "," + sink + "\\n");
      out.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  @Override public void close(Throwable error) {
    try { if (out != null) out.close(); } catch (IOException e) { /* closing only */ }
  }
}
"""


def case(name: str, *, mode: str = "rtm", trigger: str = "10 seconds", rate: int = 50,
         pad_bytes: int = 0, sink: str = "python", note: str = "") -> dict[str, Any]:
    """One measured configuration (the session settings come from its group)."""
    return {"name": name, "mode": mode, "trigger": trigger, "rate": rate,
            "pad_bytes": pad_bytes, "sink": sink, "note": note}


def plan(quick: bool, rates: list[int] | None = None) -> list[dict[str, Any]]:
    """Groups of cases; each group shares one SparkSession (one child process)."""
    if quick:
        rate = (rates or [50])[0]
        return [{"group": "default", "conf": {}, "cases": [
            case(f"rtm-5s-{rate}", trigger="5 seconds", rate=rate),
            case(f"microbatch-{rate}", mode="microbatch", trigger="0 seconds", rate=rate),
        ]}]
    rates = rates or [10, 50, 200, 1000]
    default = [case(f"rtm-10s-{r}", rate=r, note="baseline") for r in rates]
    default += [case(f"microbatch-{r}", mode="microbatch", trigger="0 seconds", rate=r,
                     note="comparison") for r in (rates[1], rates[-1])]
    default += [
        case("rtm-5s-50", trigger="5 seconds", rate=50, note="shorter trigger"),
        case("rtm-10s-50-pad64k", rate=50, pad_bytes=65536, note="64 KB padding column"),
        case("rtm-10s-50-pad1m", rate=50, pad_bytes=1 << 20, note="1 MB padding column"),
    ]
    return [
        {"group": "default", "conf": {}, "cases": default},
        {"group": "buffer-1k", "conf": {"spark.buffer.size": "1024"}, "cases": [
            case("rtm-10s-50-buffer1k", rate=50, note="spark.buffer.size=1024"),
        ]},
        {"group": "no-reuse", "conf": {"spark.python.worker.reuse": "false"}, "cases": [
            case("rtm-10s-50-noreuse", rate=50, note="spark.python.worker.reuse=false"),
            case("microbatch-50-noreuse", mode="microbatch", trigger="0 seconds", rate=50,
                 note="spark.python.worker.reuse=false"),
        ]},
        {"group": "jvm-writer", "conf": {}, "jvm_writer": True, "cases": [
            case("rtm-10s-50-jvm", rate=50, sink="jvm", note="JVM ForeachWriter"),
            case("rtm-10s-1000-jvm", rate=1000, sink="jvm", note="JVM ForeachWriter"),
        ]},
    ]


# ---------------------------------------------------------------- child side


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _compile_jvm_writer(workdir: Path) -> Path | None:
    """Compile the JVM writer against pyspark's jars; ``None`` if there is no ``javac``."""
    javac = shutil.which("javac")
    if javac is None:
        return None
    import pyspark

    classes = workdir / "jvm-classes"
    classes.mkdir(parents=True, exist_ok=True)
    source = workdir / f"{JVM_WRITER_CLASS}.java"
    source.write_text(JVM_WRITER_SOURCE, encoding="utf-8")
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    subprocess.run([javac, "-nowarn", "-cp", jars, "-d", str(classes), str(source)],
                   check=True, capture_output=True, text=True)
    return classes


def _count_lines(folder: Path) -> int:
    if not folder.exists():
        return 0
    return sum(p.read_text(encoding="ascii").count("\n") for p in folder.glob("lat-*.csv"))


def run_case(spark: Any, spec: dict[str, Any], seconds: float, workdir: Path,
             warmup: float = 5.0) -> dict[str, Any]:
    """Run one case: start the query, warm up, feed at ``rate`` for ``seconds``, drain, stop."""
    from pyspark.sql import functions as F

    from pack_lab.latency_probe import LatencyRecordingWriter, latency_report, now_ms, read_samples, with_plan_time
    from pack_lab.rtm_lab import RealTimeMemorySource

    out = workdir / spec["name"] / "out"
    source = RealTimeMemorySource(spark, "id BIGINT, source_ms BIGINT", num_partitions=1)
    df = with_plan_time(source.dataframe())
    if spec["pad_bytes"]:
        df = df.withColumn("pad", F.expr(f"repeat('x', {int(spec['pad_bytes'])})"))
    checkpoint = str(workdir / spec["name"] / "checkpoint")
    trigger_s = float(spec["trigger"].split()[0])
    if spec["sink"] == "jvm":
        jvm = spark.sparkContext._jvm
        trig = jvm.org.apache.spark.sql.streaming.Trigger.RealTime(spec["trigger"])
        writer = getattr(jvm, JVM_WRITER_CLASS)(str(out))
        query = (df._jdf.writeStream().foreach(writer).outputMode("update").trigger(trig)
                 .option("checkpointLocation", checkpoint).start())
        is_active = query.isActive
    else:
        trigger = ({"realTime": spec["trigger"]} if spec["mode"] == "rtm"
                   else {"processingTime": spec["trigger"]})
        query = (df.writeStream.foreach(LatencyRecordingWriter(out)).outputMode("update")
                 .trigger(**trigger).option("checkpointLocation", checkpoint).start())
        is_active = lambda: query.isActive
    try:
        # Warm-up row without a source stamp: the report skips it.
        source.add([{"id": -1, "source_ms": None}])
        # Give it up to ``warmup`` s to reach the sink (under RTM it may be held until
        # the long batch ends); measuring starts either way.
        deadline = time.monotonic() + warmup
        while _count_lines(out) < 1 and time.monotonic() < deadline and is_active():
            time.sleep(0.1)
        if not is_active():
            raise RuntimeError(f"query for {spec['name']} died during warm-up")
        rate = spec["rate"]
        tick = 1.0 / rate if rate < 20 else 0.05
        per_tick = max(1, round(rate * tick))
        sent = 0
        start = time.monotonic()
        next_tick = start
        while time.monotonic() - start < seconds:
            stamp = now_ms()
            source.add([{"id": sent + i, "source_ms": stamp} for i in range(per_tick)])
            sent += per_tick
            next_tick += tick
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        drain_deadline = time.monotonic() + trigger_s * 2 + 15
        while len(read_samples(out)) < sent and time.monotonic() < drain_deadline:
            if not is_active():
                raise RuntimeError(f"query for {spec['name']} died while draining")
            time.sleep(0.2)
    finally:
        query.stop()
    samples = read_samples(out)
    result = dict(spec)
    result.update({"seconds": seconds, "rows_sent": sent, "rows_recorded": len(samples),
                   "report": latency_report(samples)})
    return result


def run_group_here(group: dict[str, Any], seconds: float, warmup: float = 5.0,
                   emit: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """Run one group's cases in this process; return the results (``emit`` sees each one).

    If a SparkSession is already active (``--in-process``, e.g. inside the
    test suite) it is reused and left running; only groups without
    session-level settings can run that way.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from pyspark.sql import SparkSession

    results: list[dict[str, Any]] = []
    emit = emit or (lambda _result: None)
    workdir = Path(tempfile.mkdtemp(prefix="foreach-latency-"))
    try:
        extra = dict(group.get("conf", {}))
        active = SparkSession.getActiveSession()
        if active is not None and (extra or group.get("jvm_writer")):
            raise ValueError(f"group {group['group']} needs its own session; run it in a child process")
        if group.get("jvm_writer"):
            classes = _compile_jvm_writer(workdir)
            if classes is None:
                for spec in group["cases"]:
                    results.append({**spec, "group": group["group"], "conf": {},
                                    "skipped": "no javac"})
                    emit(results[-1])
                return results
            extra["spark.driver.extraClassPath"] = str(classes)
        if active is not None:
            spark, owned = active, False
        else:
            from pack_lab.rtm_lab import build_session

            spark = build_session(cores=CORES, shuffle_partitions=1,
                                  app_name=f"foreach-latency-{group['group']}", extra_conf=extra)
            owned = True
        try:
            for spec in group["cases"]:
                _log(f"case {spec['name']}: {spec['mode']} trigger={spec['trigger']} "
                     f"rate={spec['rate']}/s for {seconds:g} s")
                try:
                    result = run_case(spark, spec, seconds, workdir, warmup)
                except Exception as exc:  # report and carry on with the next case
                    result = {**spec, "error": f"{type(exc).__name__}: {exc}"[:500]}
                result["conf"] = group.get("conf", {})
                result["group"] = group["group"]
                leg = result.get("report", {}).get("source_to_sink", {})
                _log(f"  -> {result.get('rows_recorded', 0)} rows, source→sink p50 "
                     f"{leg.get('p50', '-')} ms, max {leg.get('max', '-')} ms")
                results.append(result)
                emit(result)
        finally:
            if owned:
                spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def child_main(group: dict[str, Any], seconds: float, warmup: float = 5.0) -> None:
    """Child-process entry: run one group and print ``RESULT <json>`` per case."""
    run_group_here(group, seconds, warmup,
                   emit=lambda result: print("RESULT " + json.dumps(result), flush=True))


# --------------------------------------------------------------- parent side


def run_group(group: dict[str, Any], seconds: float, timeout: float,
              warmup: float = 5.0) -> list[dict[str, Any]]:
    """Run a group in a child process, streaming its progress lines; return its results."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(group),
           "--seconds", str(seconds), "--warmup", str(warmup)]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    results: list[dict[str, Any]] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(ROOT))
    tail: collections.deque[str] = collections.deque(maxlen=40)

    def pump() -> None:  # show progress lines; keep the rest (Spark logs) for errors
        assert proc.stderr is not None
        for err_line in proc.stderr:
            if err_line.startswith("[") and "] " in err_line[:12]:
                sys.stderr.write(err_line)
                sys.stderr.flush()
            else:
                tail.append(err_line)

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()
    try:
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("RESULT "):
                results.append(json.loads(line[len("RESULT "):]))
            if time.monotonic() > deadline:
                raise TimeoutError(f"group {group['group']} ran longer than {timeout:.0f} s")
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pumper.join(timeout=5)
    if proc.returncode != 0 and not results:
        raise RuntimeError(f"group {group['group']} failed with exit code {proc.returncode}: "
                           + "".join(tail)[-1500:])
    return results


def machine_info(spark_master: str | None = None) -> dict[str, Any]:
    import pyspark

    return {"cores": os.cpu_count(), "spark_master": spark_master or f"local[{CORES}]",
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "system": f"{platform.system()} {platform.machine()}"}


TABLE_COLUMNS = ("case", "rate/s", "rows", "e2e p50", "e2e p95", "e2e p99", "e2e max",
                 "engine p50", "engine p95")


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    """One row per case: source→sink (e2e) and source→plan (engine) latencies in ms."""
    rows = []
    for res in results["cases"]:
        if "report" not in res:
            reason = res.get("skipped") or res.get("error", "no result")
            rows.append([res["name"], str(res["rate"]), "-", reason] + ["-"] * 5)
            continue
        e2e = res["report"]["source_to_sink"]
        engine = res["report"]["source_to_plan"]

        def cell(leg: dict[str, Any], key: str) -> str:
            return f"{leg[key]:.0f}" if key in leg else "-"

        rows.append([res["name"], str(res["rate"]), f"{res['rows_recorded']}/{res['rows_sent']}",
                     cell(e2e, "p50"), cell(e2e, "p95"), cell(e2e, "p99"), cell(e2e, "max"),
                     cell(engine, "p50"), cell(engine, "p95")])
    return rows


def markdown_table(results: dict[str, Any]) -> str:
    """The results as a Markdown table (what ``benchmarks/README.md`` embeds)."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(TABLE_COLUMNS) - 1)) + " |"]
    for row in table_rows(results):
        lines.append("| " + " | ".join([f"`{row[0]}`"] + row[1:]) + " |")
    meta = results["machine"]
    lines.append("")
    lines.append(f"Measured {results['date']} on {meta['cores']} cores, {meta['spark_master']}, "
                 f"pyspark {meta['pyspark']}, Python {meta['python']}; "
                 f"{results['seconds']:g} s of input per case. Latencies in ms.")
    return "\n".join(lines)


def text_table(results: dict[str, Any]) -> str:
    from pack_lab.text_table import aligned

    return aligned([list(TABLE_COLUMNS)] + table_rows(results))


def update_readme() -> list[str]:
    """Rewrite the table wherever the pack embeds it, from the committed JSON (the shared block writer)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from skillcheck.regenerate import write_from_script

    return write_from_script("foreach-latency")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two short cases (smoke test)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of input per case (default 12, quick 3)")
    parser.add_argument("--rates", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        help="comma-separated input rates in rows/s")
    parser.add_argument("--warmup", type=float, default=None,
                        help="max seconds to wait for the warm-up row (default 5, quick 1)")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--update-readme", action="store_true",
                        help="rewrite the results table wherever the pack embeds it "
                             "(as `scripts/skills.py generate` does)")
    parser.add_argument("--in-process", action="store_true",
                        help="run in this process, reusing an active SparkSession (tests)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 12.0)
    warmup = args.warmup if args.warmup is not None else (1.0 if args.quick else 5.0)
    if args.child:
        child_main(json.loads(args.child), seconds, warmup)
        return 0

    groups = plan(args.quick, args.rates)
    total = sum(len(g["cases"]) for g in groups)
    _log(f"foreach latency benchmark: {total} cases in {len(groups)} sessions, "
         f"{seconds:g} s of input each")
    cases: list[dict[str, Any]] = []
    for group in groups:
        _log(f"session '{group['group']}' conf={group.get('conf', {})}")
        timeout = 60 + len(group["cases"]) * (seconds + 60)
        try:
            if args.in_process:
                cases.extend(run_group_here(group, seconds, warmup))
            else:
                cases.extend(run_group(group, seconds, timeout, warmup))
        except Exception as exc:
            _log(f"session '{group['group']}' failed: {exc}")
            cases.extend({**spec, "group": group["group"], "conf": group.get("conf", {}),
                          "error": str(exc)[:500]} for spec in group["cases"]
                         if spec["name"] not in {c["name"] for c in cases})
    master = None
    if args.in_process:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        master = active.sparkContext.master if active is not None else None
    results = {"benchmark": "foreach_latency",
               "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
               "quick": args.quick, "seconds": seconds, "warmup_s": warmup,
               "machine": machine_info(master),
               "percentile_method": "nearest-rank", "cases": cases}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(text_table(results))
    print(f"\nwrote {args.output}")
    if args.update_readme:
        if args.output.resolve() != DEFAULT_OUTPUT.resolve():
            print(f"not updating the tables: they are generated from {DEFAULT_OUTPUT.relative_to(ROOT)}")
        else:
            for document in update_readme():
                print(f"updated {document}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
