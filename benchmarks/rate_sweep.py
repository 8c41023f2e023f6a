"""Benchmark: sink-visible latency into Postgres against input rate, for four sink paths.

One run, one machine, one source (the lab's real-time memory source, one
partition, rows ``id, sent_ms``), one table shape; for each path and each
input rate a fresh query writes into a fresh table:

* ``rtm-python`` — real-time mode, the Python ``foreach`` sink (``PostgresForeachWriter``) through
  stock ``writeStream.foreach``;
* ``rtm-fast-foreach`` — real-time mode, the same Python writer through ``rtm_lakebase.foreach``
  (``start_foreach_query``: rows handed to the worker as they come);
* ``rtm-jvm`` — real-time mode, the JVM sink (``rtm_lakebase.jvm.sink``);
* ``microbatch`` — micro-batch with a 0 s trigger, the Python ``foreach`` sink.

Rates: 50, 200 and 1,000 rows/s, then ``max``: the highest rate the lab
source sustains here. A calibration run feeds the fastest path (the JVM sink)
as fast as it takes rows (never more than ``MAX_BACKLOG`` rows in flight) and
counts what reaches Postgres per second; every path then runs at 90 % of that
ceiling. Calibration and figures are in the JSON.

Per point it reports **sink-visible latency** — the Postgres commit time of
the row's transaction (``track_commit_timestamp``; on a server without it,
the insert-time clock inside that transaction) minus the producer's send time —
as nearest-rank p50/p95/p99/max, **engine latency** (the per-row JVM clock
column of ``pack_lab/latency_probe.py`` minus the send time), the **sink leg**
(visible minus that JVM clock: what the sink itself adds), and the
sustained rate (rows landed / seconds from the first send to the last commit),
and **CPU seconds per 1,000 rows**: the CPU time of the whole Spark process tree
(the JVM and its Python workers, the feed included) from the first send to the
last row landed, per 1,000 rows landed. The 1-minute load average is recorded
per point (the machine may be shared).
It prints the verdicts on the targets: at 1,000 rows/s under real-time mode,
p50 ≤ 20 ms and p99 ≤ 100 ms for the JVM sink and for the fast Python foreach
path, and the fast path's highest sustained rate at least stock ``foreach``'s. Run::

    nice -n 10 .venv/bin/python benchmarks/rate_sweep.py                 # full run, ~6 min
    .venv/bin/python benchmarks/rate_sweep.py --quick --output /tmp/q.json  # smoke run
    .venv/bin/python benchmarks/rate_sweep.py --update-docs               # full run, then rewrite the tables

Results go to ``benchmarks/results/rate_sweep.json`` and ``rate_sweep.png``
(drawn from the JSON by ``benchmarks/charts.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "rate_sweep.json"
#: The results table's markers; `scripts/skills.py generate` writes the block (generator "rate-sweep" renders
#: :func:`markdown_table` from the committed JSON).
DOC_START, DOC_END = "<!-- generated:rate-sweep -->", "<!-- /generated:rate-sweep -->"
#: Every document that embeds the results table between the markers above.
TABLE_DOCUMENTS = (ROOT / "benchmarks" / "README.md", ROOT / "references" / "real-time-mode.md")

PATHS = ("rtm-python", "rtm-fast-foreach", "rtm-jvm", "microbatch")
DEFAULT_RATES: list[int | str] = [50, 200, 1000, "max"]
#: Task slots: one source partition, a stateless query; two cores like the machine.
CORES = 2
#: The targets this benchmark checks (``TARGET`` is the JVM sink's, ``FAST_TARGET`` the fast foreach path's).
TARGET = {"path": "rtm-jvm", "rate": 1000, "p50_ms": 20, "p99_ms": 100}
FAST_TARGET = {"path": "rtm-fast-foreach", "rate": 1000, "p50_ms": 20, "p99_ms": 100}
#: Rows per ``add()`` when feeding as fast as the path takes them, and the most rows
#: sent but not yet in Postgres at any time during that feed.
MAX_CHUNK = 500
MAX_BACKLOG = 10_000
#: Calibration: seconds of counting after an unpaced feed, and the share of the ceiling run as "max".
CALIBRATION_TAIL_S = 3.0
MAX_SHARE = 0.9

Log = Callable[[str], None]


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ one point


def tree_cpu(root_pid: int) -> dict[int, float]:
    """CPU seconds (user + system, plus the children each reaped) of ``root_pid`` and every live descendant, per
    process (Linux ``/proc``); empty where ``/proc`` is missing."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = entry.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        ppid = int(fields[1])
        cpu = sum(int(f) for f in fields[11:15]) / ticks  # utime stime cutime cstime
        stats[int(entry.parent.name)] = (ppid, cpu)
    tree, frontier = set(), [root_pid]
    while frontier:
        pid = frontier.pop()
        if pid in tree or pid not in stats:
            continue
        tree.add(pid)
        frontier.extend(child for child, (parent, _) in stats.items() if parent == pid)
    return {pid: stats[pid][1] for pid in tree}


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`tree_cpu` samples by the processes alive at the second one.

    A process that exited in between (a Python worker) takes its CPU with it, unless its parent reaped it; a
    difference of the two sums would then go negative. Per process, never below zero: a lower bound."""
    return sum(max(0.0, cpu - before.get(pid, 0.0)) for pid, cpu in after.items())


def spark_pid(spark) -> int | None:
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    return getattr(proc, "pid", None)


def table_ddl(table: str):
    from psycopg import sql

    from pack_lab.sink_clock import WRITTEN_MS_COLUMN

    return sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, sent_ms bigint, plan_ms bigint, "
                   + WRITTEN_MS_COLUMN + ")").format(sql.Identifier(table))


def start_query(path: str, df, dsn: str, table: str, checkpoint: str, trigger: str,
                dwell_ms: int, batch_rows: int):
    name = f"rate_sweep_{path.replace('-', '_')}"
    if path == "rtm-jvm":
        from rtm_lakebase.jvm.sink import start_jvm_sink_query

        return start_jvm_sink_query(df, dsn=dsn, table=table, key_columns=("id",), mode="upsert",
                                    max_batch_rows=batch_rows, max_dwell_ms=dwell_ms,
                                    checkpoint_location=checkpoint, trigger={"realTime": trigger},
                                    query_name=name)
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    writer = PostgresForeachWriter(dsn, SinkSettings(table=table, mode="upsert", key_columns=("id",),
                                                     max_batch_rows=batch_rows, max_dwell_ms=dwell_ms))
    trig = {"realTime": trigger} if path.startswith("rtm-") else {"processingTime": "0 seconds"}
    if path == "rtm-fast-foreach":
        from rtm_lakebase.foreach import start_foreach_query

        return start_foreach_query(df, writer, checkpoint_location=checkpoint, trigger=trig, query_name=name)
    return (df.writeStream.queryName(name).foreach(writer).outputMode("update").trigger(**trig)
            .option("checkpointLocation", checkpoint).start())


def _count(conn, table: str) -> int:
    from psycopg import sql

    return conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE id >= 0").format(
        sql.Identifier(table))).fetchone()[0]


def wait_landed(conn, table: str, query, expected: int, timeout: float, poll: float = 0.2) -> int:
    """Rows landed in ``table`` (``id >= 0``), polled until ``expected`` did or ``timeout`` seconds passed;
    raises when the query dies meanwhile."""
    deadline = time.monotonic() + timeout
    landed = _count(conn, table)
    while landed < expected and time.monotonic() < deadline:
        if not query.isActive:
            raise RuntimeError(f"query died while draining: {str(query.exception()).splitlines()[0]}")
        time.sleep(poll)
        landed = _count(conn, table)
    return landed


def landed_rows(conn, table: str) -> tuple[list[tuple[int, int | None, int]], str]:
    """``(sent_ms, plan_ms, visible_ms)`` of every landed row (``id >= 0``) and the visibility clock's name."""
    from psycopg import sql

    from pack_lab.sink_clock import visible_clock

    clock, clock_name = visible_clock(conn)
    rows = conn.execute(sql.SQL("SELECT sent_ms, plan_ms, " + clock + " FROM {} WHERE id >= 0")
                        .format(sql.Identifier(table))).fetchall()
    return rows, clock_name


def feed(source, rate: int | str, seconds: float, progress: Callable[[int], None],
         landed: Callable[[], int] | None = None) -> tuple[int, float]:
    """Add rows stamped with ``sent_ms`` at ``rate`` rows/s for ``seconds``.

    ``rate="max"`` adds rows as fast as the path takes them: a new chunk whenever fewer
    than :data:`MAX_BACKLOG` rows sent are not yet in Postgres (``landed()`` counts them),
    so the source never holds an unbounded pile (it slows down as it holds more).
    """
    from pack_lab.latency_probe import now_ms

    sent = 0
    start = time.monotonic()
    next_progress = start + 2.0
    if rate == "max":
        tick, per_tick = 0.0, MAX_CHUNK
    else:
        tick = max(1.0 / float(rate), 0.01)
        per_tick = max(1, round(float(rate) * tick))
    next_tick = start
    seen = 0
    while time.monotonic() - start < seconds:
        if rate == "max" and landed is not None and sent - seen >= MAX_BACKLOG:
            seen = landed()
            if sent - seen >= MAX_BACKLOG:
                time.sleep(0.02)
                continue
        stamp = now_ms()
        source.add([{"id": sent + i, "sent_ms": stamp} for i in range(per_tick)])
        sent += per_tick
        now = time.monotonic()
        if now >= next_progress:
            progress(sent)
            next_progress = now + 2.0
        if tick:
            next_tick += tick
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return sent, time.monotonic() - start


def run_point(spark, dsn: str, path: str, rate: int | str, *, seconds: float, trigger: str,
              dwell_ms: int, batch_rows: int, warmup: float, log: Log = _log,
              calibrate: bool = False) -> dict[str, Any]:
    """One path at one rate: fresh table and query, feed, drain, measure, clean up.

    ``calibrate``: feed as fast as the source accepts and return the rows per second that
    reached Postgres (no drain, no percentiles).
    """
    import psycopg
    from psycopg import sql

    from pack_lab.latency_probe import summarize, with_plan_time
    from pack_lab.rtm_lab import RealTimeMemorySource

    table = f"rate_sweep_{path.replace('-', '_')}_{rate}_{int(time.time() * 1000)}"
    trigger_s = float(trigger.split()[0])
    point: dict[str, Any] = {"path": path, "rate": rate}
    with contextlib.ExitStack() as cleanup:
        conn = cleanup.enter_context(psycopg.connect(dsn, autocommit=True, connect_timeout=10))
        cleanup.callback(lambda: conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(
            sql.Identifier(table))))
        conn.execute(table_ddl(table))
        checkpoint = tempfile.mkdtemp(prefix="rate-sweep-checkpoint-")
        cleanup.callback(shutil.rmtree, checkpoint, True)
        source = RealTimeMemorySource(spark, "id BIGINT, sent_ms BIGINT", num_partitions=1)
        df = with_plan_time(source.dataframe())
        query = start_query(path, df, dsn, table, checkpoint, trigger, dwell_ms, batch_rows)
        cleanup.callback(lambda: query.stop() if query.isActive else None)
        # Warm-up row (id -1, left out of every figure): the first row pays for connections.
        source.add([{"id": -1, "sent_ms": None}])
        deadline = time.monotonic() + warmup
        while time.monotonic() < deadline and query.isActive:
            if conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE id < 0").format(
                    sql.Identifier(table))).fetchone()[0]:
                break
            time.sleep(0.1)
        if not query.isActive:
            raise RuntimeError(f"query died during warm-up: {str(query.exception()).splitlines()[0]}")
        started = time.monotonic()
        pid = spark_pid(spark)
        cpu_before = tree_cpu(pid) if pid else {}
        sent, fed_s = feed(source, rate, seconds,
                           lambda n: log(f"  {path} @ {rate}: sent {n}, landed {_count(conn, table)}"),
                           landed=lambda: _count(conn, table))
        if calibrate:  # the backlog keeps the path saturated: what lands per second is its ceiling
            time.sleep(CALIBRATION_TAIL_S)
            landed = _count(conn, table)
            elapsed = time.monotonic() - started
            return {"path": path, "seconds": round(elapsed, 2), "rows_sent": sent,
                    "rows_landed": landed, "rows_per_s": round(landed / elapsed, 1)}
        wait_landed(conn, table, query, sent, timeout=trigger_s * 2 + 20)
        cpu_s = cpu_used(cpu_before, tree_cpu(pid)) if pid else None
        query.stop()
        rows, clock_name = landed_rows(conn, table)
    visible = [r[2] - r[0] for r in rows]
    engine = [r[1] - r[0] for r in rows if r[1] is not None]
    sink = [r[2] - r[1] for r in rows if r[1] is not None]
    span_s = (max(r[2] for r in rows) - min(r[0] for r in rows)) / 1000 if rows else 0.0
    point.update({
        "seconds": round(fed_s, 2), "rows_sent": sent, "rows_landed": len(rows),
        "offered_rows_per_s": round(sent / fed_s, 1) if fed_s else 0.0,
        "sustained_rows_per_s": round(len(rows) / span_s, 1) if span_s > 0 else 0.0,
        "visible": summarize(visible), "engine": summarize(engine), "sink": summarize(sink),
        "clock": clock_name,
        "cpu_s": round(cpu_s, 2) if cpu_s is not None else None,
        "cpu_s_per_1000_rows": round(cpu_s / len(rows) * 1000, 3) if cpu_s is not None and rows else None,
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    })
    return point


# ------------------------------------------------------------------ the sweep


def max_point(results: dict[str, Any], path: str) -> dict[str, Any] | None:
    return next((p for p in results["points"] if p["path"] == path and p.get("is_max") and "visible" in p), None)


def fast_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """The fast foreach path's targets: p50/p99 at 1,000 rows/s, and at the highest rate a
    sustained rate at least stock foreach's (``rtm-python``) in the same run."""
    target = verdict(results, FAST_TARGET)
    fast, stock = max_point(results, "rtm-fast-foreach"), max_point(results, "rtm-python")
    if fast is None or stock is None:
        target["sustained_met"] = False
        target["sustained_verdict"] = "NOT MEASURED: no point at the highest rate for both foreach paths"
    else:
        ok = fast["sustained_rows_per_s"] >= stock["sustained_rows_per_s"] and \
            fast["rows_landed"] == fast["rows_sent"]
        target["sustained_met"] = ok
        target["sustained_verdict"] = (
            f"{'MET' if ok else 'MISSED'}: at {fast['rate']} rows/s offered the fast path sustained "
            f"{fast['sustained_rows_per_s']:.0f} rows/s, stock foreach {stock['sustained_rows_per_s']:.0f} rows/s")
    return target


def verdict(results: dict[str, Any], goal: dict[str, Any] = TARGET) -> dict[str, Any]:
    """Did ``goal['path']`` (default the JVM sink) under real-time mode at the target rate meet p50/p99?"""
    point = next((p for p in results["points"] if p["path"] == goal["path"]
                  and p["rate"] == goal["rate"]), None)
    target = dict(goal)
    if point is None or "visible" not in point or not point["visible"].get("count"):
        why = (point or {}).get("skipped") or (point or {}).get("error") or "not measured in this run"
        target.update(met=False, verdict=f"NOT MEASURED: {why}")
        return target
    vis = point["visible"]
    misses = [f"{q} {vis[q]:.0f} ms > {target[q + '_ms']} ms" for q in ("p50", "p99")
              if vis[q] > target[q + "_ms"]]
    if point["rows_landed"] < point["rows_sent"]:
        misses.append(f"only {point['rows_landed']} of {point['rows_sent']} rows landed")
    target["met"] = not misses
    target["verdict"] = (f"MET: p50 {vis['p50']:.0f} ms ≤ {target['p50_ms']} ms, p99 {vis['p99']:.0f} ms ≤ "
                         f"{target['p99_ms']} ms" if not misses else "MISSED: " + "; ".join(misses))
    return target


def machine_info(spark) -> dict[str, Any]:
    import pyspark

    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cores": os.cpu_count(), "spark_master": spark.sparkContext.master,
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "system": f"{platform.system()} {platform.machine()}",
            "nice": os.nice(0) if hasattr(os, "nice") else 0,
            "load_average_1m_at_start": round(load[0], 2)}


def sweep(spark, dsn: str, *, paths: list[str], rates: list[int | str], seconds: float, trigger: str,
          dwell_ms: int, batch_rows: int, warmup: float, jvm_why_not: str | None,
          fast_why_not: str | None = None, log: Log = _log) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "rate_sweep", "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "machine": machine_info(spark), "trigger": trigger, "seconds": seconds,
        "dwell_ms": dwell_ms, "batch_rows": batch_rows, "percentile_method": "nearest-rank",
        "points": [],
    }
    requested = list(rates)
    if "max" in rates:
        # The highest rate the lab source sustains: feed it unpaced into the fastest path
        # (the JVM sink when there is one), count what reaches Postgres per second, then
        # run every path at MAX_SHARE of that ceiling.
        probe = "rtm-jvm" if "rtm-jvm" in paths and not jvm_why_not else "microbatch"
        log(f"calibrating the source's ceiling with {probe}, unpaced for {seconds:g} s")
        try:
            calibration = run_point(spark, dsn, probe, "max", seconds=seconds, trigger=trigger,
                                    dwell_ms=dwell_ms, batch_rows=batch_rows, warmup=warmup, log=log,
                                    calibrate=True)
        except Exception as exc:
            calibration = {"path": probe, "rows_per_s": 0.0, "error": f"{type(exc).__name__}: {exc}"[:300]}
            log(f"  calibration failed: {calibration['error']}")
        ceiling = calibration["rows_per_s"]
        max_rate = max(100, int(ceiling * MAX_SHARE) // 100 * 100)
        calibration.update(max_share=MAX_SHARE, max_rate=max_rate)
        results["calibration"] = calibration
        log(f"  the source sustained {ceiling:.0f} rows/s into Postgres: 'max' runs at {max_rate} rows/s")
        rates = [max_rate if r == "max" else r for r in rates]
        results["max_rate"] = max_rate
    numeric = {r for r in requested if r != "max"}
    for path in paths:
        for rate in rates:
            why_not = {"rtm-jvm": jvm_why_not, "rtm-fast-foreach": fast_why_not}.get(path)
            if why_not:
                results["points"].append({"path": path, "rate": rate, "skipped": why_not,
                                          **({"is_max": True} if rate not in numeric else {})})
                log(f"{path} @ {rate}: skipped ({why_not})")
                continue
            log(f"{path} @ {rate} rows/s for {seconds:g} s")
            try:
                point = run_point(spark, dsn, path, rate, seconds=seconds, trigger=trigger,
                                  dwell_ms=dwell_ms, batch_rows=batch_rows, warmup=warmup, log=log)
            except Exception as exc:  # report it and go on with the next point
                point = {"path": path, "rate": rate, "error": f"{type(exc).__name__}: {exc}"[:300]}
                log(f"  failed: {point['error']}")
            else:
                vis = point["visible"]
                log(f"  {point['rows_landed']}/{point['rows_sent']} rows, offered "
                    f"{point['offered_rows_per_s']:.0f}/s, sustained {point['sustained_rows_per_s']:.0f}/s, "
                    f"visible p50 {vis.get('p50', '-')} p99 {vis.get('p99', '-')} ms")
            if rate == results.get("max_rate") and rate not in numeric:
                point["is_max"] = True
            results["points"].append(point)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0,)
    results["machine"]["load_average_1m_at_end"] = round(load[0], 2)
    results["target"] = verdict(results)
    results["fast_foreach_target"] = fast_verdict(results)
    return results


# ------------------------------------------------------------------ tables


COLUMNS = ("path", "rate", "offered/s", "sustained/s", "rows", "visible p50", "p95", "p99", "max",
           "engine p50", "engine p99", "sink p50", "sink p99", "CPU s/1k rows")
PATH_LABELS = {"rtm-python": "RTM + Python foreach", "rtm-fast-foreach": "RTM + fast Python foreach",
               "rtm-jvm": "RTM + JVM sink", "microbatch": "micro-batch + Python foreach"}


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for p in results["points"]:
        label = PATH_LABELS.get(p["path"], p["path"])
        rate = f"max ({p['rate']})" if p.get("is_max") else str(p["rate"])
        if "visible" not in p:
            rows.append([label, rate, "-", "-", "-", p.get("skipped") or p.get("error", "-")]
                        + ["-"] * 8)
            continue
        vis, eng, sink = p["visible"], p["engine"], p.get("sink", {})

        def ms(stats: dict[str, Any], key: str) -> str:
            return f"{stats[key]:.0f}" if key in stats else "-"

        rows.append([label, rate, f"{p['offered_rows_per_s']:.0f}",
                     f"{p['sustained_rows_per_s']:.0f}", f"{p['rows_landed']}/{p['rows_sent']}",
                     ms(vis, "p50"), ms(vis, "p95"), ms(vis, "p99"), ms(vis, "max"),
                     ms(eng, "p50"), ms(eng, "p99"), ms(sink, "p50"), ms(sink, "p99"),
                     f"{p['cpu_s_per_1000_rows']:.2f}" if p.get("cpu_s_per_1000_rows") is not None else "-"])
    return rows


def markdown_table(results: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "| " + " | ".join(["---"] + ["---:"] * (len(COLUMNS) - 1)) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    m = results["machine"]
    lines += ["", f"Measured {results['date']} on {m['cores']} cores ({m['spark_master']}, pyspark "
              f"{m['pyspark']}, Python {m['python']}), real-time trigger {results['trigger']}, "
              f"{results['seconds']:g} s of input per point, sink flush at {results['batch_rows']} rows "
              f"or {results['dwell_ms']} ms; 1-minute load average {m['load_average_1m_at_start']:g} "
              f"at the start and {m.get('load_average_1m_at_end', 0):g} at the end (the machine was shared). "
              f"Latencies in ms. Target (JVM sink, real-time mode, {results['target']['rate']} rows/s, "
              f"p50 ≤ {results['target']['p50_ms']} ms, p99 ≤ {results['target']['p99_ms']} ms): "
              f"**{results['target']['verdict']}**."]
    fast = results.get("fast_foreach_target")
    if fast:
        lines[-1] += (f" Target (fast Python foreach, real-time mode, {fast['rate']} rows/s, p50 ≤ "
                      f"{fast['p50_ms']} ms, p99 ≤ {fast['p99_ms']} ms): **{fast['verdict']}**; highest "
                      f"sustained rate at least stock foreach's: **{fast['sustained_verdict']}**.")
    lines[-1] += (" CPU: seconds of CPU of the Spark process tree (JVM + Python workers, feed included) "
                  "per 1,000 rows landed.")
    return "\n".join(lines)


FAST_COMPARED = ("rtm-python", "rtm-fast-foreach", "rtm-jvm")


def fast_foreach_table(results: dict[str, Any]) -> str:
    """The fast foreach path beside stock foreach and the JVM sink, same run (a generated block in the
    references: ``<!-- generated:fast-foreach -->``)."""
    lines = ["| rate (rows/s) | path | visible p50 | p99 | sustained/s | CPU s per 1,000 rows |",
             "| ---: | --- | ---: | ---: | ---: | ---: |"]
    for p in results["points"]:
        if p["path"] not in FAST_COMPARED or "visible" not in p:
            continue
        rate = f"max ({p['rate']:,})" if p.get("is_max") else f"{p['rate']:,}"
        cpu = p.get("cpu_s_per_1000_rows")
        lines.append(f"| {rate} | {PATH_LABELS[p['path']]} | {p['visible']['p50']:,.0f} ms | "
                     f"{p['visible']['p99']:,.0f} ms | {p['sustained_rows_per_s']:,.0f} | "
                     f"{'-' if cpu is None else f'{cpu:.2f}'} |")
    m, fast = results["machine"], results.get("fast_foreach_target", {})
    lines += ["", f"From `benchmarks/results/rate_sweep.json` ({results['date']}, {m['cores']} cores shared with "
              f"other jobs: 1-minute load average {m['load_average_1m_at_start']:g} at the start, "
              f"{m.get('load_average_1m_at_end', 0):g} at the end; real-time trigger {results['trigger']}, "
              f"{results['seconds']:g} s of input per point, the pack's `PostgresForeachWriter` flushing at "
              f"{results['dwell_ms']} ms). Fast path at {fast.get('rate', 1000):,} rows/s: "
              f"**{fast.get('verdict', 'not measured')}**; highest rate: **{fast.get('sustained_verdict', 'not measured')}**."]
    return "\n".join(lines)


def text_table(results: dict[str, Any]) -> str:
    from pack_lab.text_table import aligned

    return aligned([list(COLUMNS)] + table_rows(results))


def update_documents() -> list[str]:
    """Rewrite the table wherever the pack embeds it, from the committed JSON (the shared block writer)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from skillcheck.regenerate import write_from_script

    return write_from_script("rate-sweep")


# ------------------------------------------------------------------ main


def parse_rates(text: str) -> list[int | str]:
    rates: list[int | str] = []
    for item in text.split(","):
        item = item.strip().lower()
        if item == "max":
            rates.append("max")
            continue
        if not item.isdigit() or not 1 <= int(item) <= 100_000:
            raise argparse.ArgumentTypeError(f"rates are whole numbers from 1 to 100000 or 'max', got {item!r}")
        rates.append(int(item))
    return rates


def main(argv: list[str] | None = None, spark=None, dsn: str | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one rate, 3 s per point (smoke run)")
    parser.add_argument("--rates", type=parse_rates, default=None, help="e.g. 50,200,1000,max")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated subset of " + ",".join(PATHS))
    parser.add_argument("--seconds", type=float, default=None, help="seconds of input per point (default 12)")
    parser.add_argument("--trigger", default="10 seconds", help="real-time trigger (default 10 seconds)")
    parser.add_argument("--dwell-ms", type=int, default=5, help="sink flush interval (default 5 ms)")
    parser.add_argument("--batch-rows", type=int, default=1000, help="sink flush size (default 1000)")
    parser.add_argument("--warmup", type=float, default=5.0, help="max seconds for the warm-up row")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--update-docs", action="store_true",
                        help="rewrite the table wherever the pack embeds it (benchmarks/README.md, references)")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="run nothing: redraw the chart (and with --update-docs the tables) from this JSON")
    args = parser.parse_args(argv)
    if args.from_json is not None:
        results = json.loads(args.from_json.read_text(encoding="utf-8"))
        return report(results, args.from_json, args.update_docs)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    if not paths or any(p not in PATHS for p in paths):
        parser.error(f"--paths must be a subset of {','.join(PATHS)}")
    rates = args.rates or ([200] if args.quick else DEFAULT_RATES)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 12.0)

    from pack_lab.local_postgres import postgres_dsn
    from pack_lab.sink_clock import SERVER_SETTINGS

    jars: list[str] = []
    jvm_why_not = None
    if "rtm-jvm" in paths:
        try:
            from rtm_lakebase.jvm.sink import jvm_sink_jars

            jars = jvm_sink_jars()
        except Exception as exc:
            jvm_why_not = str(exc).splitlines()[0]
    fast_why_not = None
    if "rtm-fast-foreach" in paths:
        from rtm_lakebase.foreach import FastForeachUnavailable, foreach_jars

        try:
            jars += foreach_jars()
        except FastForeachUnavailable as exc:
            fast_why_not = str(exc)
    from pack_lab.interrupts import interrupts_raise

    with interrupts_raise(), contextlib.ExitStack() as stack:  # SIGTERM too: tables, folders, servers go
        if dsn is None:
            dsn = stack.enter_context(postgres_dsn(settings=SERVER_SETTINGS))
        if spark is None:
            from pack_lab.rtm_lab import build_session

            spark = build_session(cores=CORES, shuffle_partitions=1, app_name="rate-sweep",
                                  jars=jars or None)
            spark.sparkContext.setLogLevel("OFF")
            stack.callback(spark.stop)
        loaded = spark.sparkContext.getConf().get("spark.jars", "") or ""
        if jars and not all(Path(j).name in loaded for j in jars):
            jvm_why_not = "the running SparkSession was started without the JVM sink jars"
        _log(f"rate sweep: paths {paths}, rates {rates}, {seconds:g} s per point, trigger {args.trigger}")
        results = sweep(spark, dsn, paths=paths, rates=rates, seconds=seconds, trigger=args.trigger,
                        dwell_ms=args.dwell_ms, batch_rows=args.batch_rows, warmup=args.warmup,
                        jvm_why_not=jvm_why_not, fast_why_not=fast_why_not)
    results["quick"] = args.quick
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return report(results, args.output, args.update_docs)


def report(results: dict[str, Any], output: Path, update_docs: bool) -> int:
    """Print the table and the verdict, draw the chart next to ``output``, optionally rewrite the docs."""
    from benchmarks.charts import render_rate_sweep

    chart = render_rate_sweep(results, output.with_suffix(".png"))
    print(text_table(results))
    print(f"\ntarget (JVM sink, real-time mode, {TARGET['rate']} rows/s, p50 ≤ {TARGET['p50_ms']} ms, "
          f"p99 ≤ {TARGET['p99_ms']} ms): {results['target']['verdict']}")
    fast = results.get("fast_foreach_target")
    if fast:
        print(f"target (fast Python foreach, real-time mode, {fast['rate']} rows/s, p50 ≤ {fast['p50_ms']} ms, "
              f"p99 ≤ {fast['p99_ms']} ms): {fast['verdict']}; highest rate: {fast['sustained_verdict']}")
    print(f"wrote {chart}")
    if update_docs:
        if output.resolve() != DEFAULT_OUTPUT.resolve():
            print(f"not updating the tables: they are generated from {DEFAULT_OUTPUT.relative_to(ROOT)}")
        else:
            for document in update_documents():
                print(f"updated {document}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
