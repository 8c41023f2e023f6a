"""Where the end-to-end tail of a real-time query into Postgres comes from, row by row, at 1,000 rows/s.

The lab's rate source (``pack_lab/jvm/RateSource.java``) gives every row its due time
(``sent_ms``: row ``i`` is due at ``start + i`` ms at 1,000 rows/s, and is emitted no earlier). Each
row also carries ``plan_ms``, the JVM clock evaluated per row inside the query just after the
source emitted it (``pack_lab/latency_probe.py``), and Postgres records when its transaction
committed (``track_commit_timestamp``, ``pack_lab/sink_clock.py``). Per row:

- **source lateness** = ``plan_ms - sent_ms``: how late the engine emitted it (source + engine);
- **sink leg** = ``commit - plan_ms``: the sink path (buffer, flush, commit);
- **end to end** = ``commit - sent_ms``.

Every row later than ``--late-ms`` (default 50 ms) at the source is attributed: **batch boundary**
when its due time lies between the end of one long batch and the first row of the next (real-time
mode ends a long batch every trigger interval, commits, plans the next and starts its tasks: rows
due meanwhile are emitted in a burst when the new task starts), **JVM pause** when a JVM stop-the-world
pause (``-Xlog:gc,safepoint``) overlaps its wait, else **other**. The stalls themselves (runs of
due rows with no emission) are listed with their length, their batch and any pause inside them.

Each path (the JVM sink, the fast Python foreach path) runs once per trigger (default the sweep's
``10 seconds`` and ``5 minutes``, the production kind: no batch ends inside the run), each for
``--seconds`` of input into a fresh table, one after the other in one ``local[2]`` session. The
1-minute load average is recorded per point. Run::

    nice -n 10 .venv/bin/python benchmarks/tail_latency.py                         # ~4 minutes
    .venv/bin/python benchmarks/tail_latency.py --quick --output /tmp/tail.json    # one short point

Writes ``benchmarks/results/tail_latency.json``. Uses ``PG_DSN`` when set (the sink leg then uses
the insert-time clock when ``track_commit_timestamp`` is off there), otherwise a throwaway server.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "tail_latency.json"
PATHS = ("rtm-jvm", "rtm-fast-foreach")
TRIGGERS = ("10 seconds", "5 minutes")
#: The longest a query may take to land its first row (a loaded machine starts Spark slowly).
MAX_STARTUP_S = 120
#: The measured window starts this long after the first row landed: the start-up backlog drains first.
SETTLE_MS = 3000
#: The end-to-end target this study checks (the rate sweep's: real-time mode, 1,000 rows/s).
P99_TARGET_MS = 100


def say(message: str) -> None:
    print(f"[tail {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ GC log
_SAFEPOINT = re.compile(r'^\[(?P<time>[^\]]+)\] Safepoint "(?P<what>[^"]*)".*Total: (?P<ns>[0-9]+) ns')


def gc_pauses(path: str, min_ms: float = 1.0) -> list[tuple[int, int, str]]:
    """``(start_ms, end_ms, what)`` of every stop-the-world pause of ``min_ms`` or more, from the safepoint
    lines of a ``-Xlog:gc,safepoint:file=...:time`` log (a GC pause is a safepoint too, named for its cause).

    A unified-logging line is written when its safepoint ends; its start is that minus its total length.
    """
    pauses = []
    with contextlib.suppress(FileNotFoundError), open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            m = _SAFEPOINT.search(line.strip())
            if not m:
                continue
            end = dt.datetime.fromisoformat(m["time"].replace("+0000", "+00:00")).timestamp() * 1000
            length = int(m["ns"]) / 1e6
            if length >= min_ms:
                pauses.append((int(end - length), int(end), m["what"]))
    return sorted(pauses)


# ------------------------------------------------------------------ one point
def run_point(spark, dsn: str, path: str, trigger: str, *, rate: int, seconds: float, dwell_ms: int,
              batch_rows: int, gc_log: str) -> dict[str, Any]:
    import psycopg
    from psycopg import sql

    from benchmarks.rate_sweep import _count, start_query, table_ddl
    from pack_lab.latency_probe import with_plan_time
    from pack_lab.rate_source import rate_stream
    from pack_lab.sink_clock import visible_clock

    table = f"tail_{path.replace('-', '_')}_{int(time.time() * 1000)}"
    total = int(rate * (seconds + MAX_STARTUP_S))  # the stream outlasts any start-up; stopped after the window
    with contextlib.ExitStack() as cleanup:
        conn = cleanup.enter_context(psycopg.connect(dsn, autocommit=True, connect_timeout=10))
        cleanup.callback(lambda: conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table))))
        conn.execute(table_ddl(table))
        checkpoint = tempfile.mkdtemp(prefix="tail-checkpoint-")
        cleanup.callback(shutil.rmtree, checkpoint, True)
        start_ms = int(time.time() * 1000) + 1000
        df = with_plan_time(rate_stream(spark, rate, total, start_ms).select("id", "sent_ms"))
        query = start_query(path, df, dsn, table, checkpoint, trigger, dwell_ms, batch_rows)
        cleanup.callback(lambda: query.stop() if query.isActive else None)

        def alive() -> None:
            if not query.isActive:
                raise RuntimeError(f"query died: {str(query.exception()).splitlines()[0]}")

        # The window starts once rows land and the start-up backlog is written: rows due before are left out.
        give_up = time.time() + MAX_STARTUP_S
        while _count(conn, table) == 0:
            alive()
            if time.time() > give_up:
                raise RuntimeError(f"no row landed within {MAX_STARTUP_S} s of starting the query")
            time.sleep(0.2)
        window = (int(time.time() * 1000) + SETTLE_MS, int(time.time() * 1000) + SETTLE_MS + int(seconds * 1000))
        load = [round(os.getloadavg()[0], 2)]
        due_in_window = sql.SQL("SELECT count(*) FROM {} WHERE sent_ms >= %s AND sent_ms < %s").format(
            sql.Identifier(table))
        expected = (window[1] - window[0]) * rate // 1000
        deadline = window[1] / 1000 + 60
        while time.time() < deadline:
            alive()
            if time.time() * 1000 > window[1] and conn.execute(due_in_window, window).fetchone()[0] >= expected:
                break
            time.sleep(0.5)
        time.sleep(0.5)
        load.append(round(os.getloadavg()[0], 2))
        progress = [{"batchId": p["batchId"], "timestamp": p["timestamp"], "durationMs": p.get("durationMs", {}),
                     "numInputRows": p.get("numInputRows")} for p in query.recentProgress]
        query.stop()
        clock, clock_name = visible_clock(conn)
        rows = conn.execute(sql.SQL("SELECT id, sent_ms, plan_ms, " + clock + " FROM {} WHERE sent_ms < %s "
                                    "ORDER BY id").format(sql.Identifier(table)), (window[1] + 2000,)).fetchall()
    return analyse(path, trigger, rows, window, progress, gc_pauses(gc_log), clock_name, load,
                   {"rate": rate, "seconds": seconds, "dwell_ms": dwell_ms, "batch_rows": batch_rows,
                    "started_ms": start_ms})


def batch_edges(progress: list[dict[str, Any]]) -> list[int]:
    """When long batches ended and began (ms), from the progress of the batches that completed.

    A batch's progress gives its start and its length; the next batch starts after the end is
    committed (the batch still running at the end of a point has no progress yet, but its start
    follows the last end). The query's first start is not an edge between two batches.
    """
    edges = []
    for i, p in enumerate(progress):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            start = int(dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
            if i > 0:
                edges.append(start)
            edges.append(start + int(p["durationMs"]["triggerExecution"]))
    return sorted(edges)


def boundary_parts(stall: dict[str, Any], progress: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A boundary stall cut at the end of the batch before it and the start of the batch after it (ms).

    ``last_rows_to_batch_end``: from the last row emitted to the old batch's end (its tasks finish,
    the sink closes, offsets commit); ``between_batches``: old end to new start; ``start_to_first_row``:
    from the new batch's start to its first row (planning, the write-ahead log, task launch, sink open).
    With the new batch's own phase times (``durationMs``) when its progress exists.
    """
    spans = []
    for p in progress:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            start = int(dt.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000)
            spans.append((start, start + int(p["durationMs"]["triggerExecution"]), p))
    spans.sort(key=lambda x: x[0])
    for (_s0, end0, _p0), (start1, _e1, p1) in zip(spans, spans[1:], strict=False):
        if stall["from_ms"] - 500 <= end0 <= stall["to_ms"] + 500:
            phases = {k: v for k, v in p1.get("durationMs", {}).items() if k not in ("triggerExecution", "addBatch")}
            return {"last_rows_to_batch_end": end0 - stall["from_ms"], "between_batches": start1 - end0,
                    "start_to_first_row": stall["to_ms"] - start1, "next_batch_phases_ms": phases}
    if spans and stall["from_ms"] - 500 <= spans[-1][1] <= stall["to_ms"] + 500:  # the next batch is still running
        return {"last_rows_to_batch_end": spans[-1][1] - stall["from_ms"],
                "batch_end_to_first_row": stall["to_ms"] - spans[-1][1]}
    return None


def stalls(rows: list[tuple], min_ms: int = 50) -> list[dict[str, Any]]:
    """Runs where the source emitted nothing for ``min_ms`` or more while rows were due.

    Consecutive rows (by id) are due about 1 ms apart at 1,000 rows/s; a jump in their emission
    clock beyond both that and ``min_ms`` is a stall from the earlier emission to the later one.
    """
    found = []
    for (_i0, due0, plan0, _c0), (i1, due1, plan1, _c1) in zip(rows, rows[1:], strict=False):
        if plan0 is None or plan1 is None:
            continue
        if plan1 - plan0 >= min_ms and plan1 - plan0 > (due1 - due0) + min_ms:
            found.append({"from_ms": plan0, "to_ms": plan1, "length_ms": plan1 - plan0, "first_id_after": i1})
    return found


def analyse(path: str, trigger: str, rows: list[tuple], window: tuple[int, int], progress: list[dict[str, Any]],
            pauses: list[tuple[int, int, str]], clock_name: str, load: list[float], settings: dict[str, Any],
            late_ms: int = 50) -> dict[str, Any]:
    """Percentiles of the three legs over the rows due in ``window``, the stalls and what each late row waited for."""
    from pack_lab.latency_probe import summarize

    counted = [r for r in rows if window[0] <= r[1] < window[1] and r[2] is not None]
    expected = (window[1] - window[0]) * settings["rate"] // 1000
    e2e = [r[3] - r[1] for r in counted]
    source = [r[2] - r[1] for r in counted]
    sink = [r[3] - r[2] for r in counted]
    edges = batch_edges(progress)
    pause_starts = [p[0] for p in pauses]

    def pauses_in(lo: int, hi: int) -> list[tuple[int, int, str]]:
        i = bisect.bisect_left(pause_starts, lo - 10_000)
        return [p for p in pauses[i:] if p[0] < hi and p[1] > lo]

    def paused_ms(lo: int, hi: int) -> float:
        return sum(min(p[1], hi) - max(p[0], lo) for p in pauses_in(lo, hi))

    found = [s for s in stalls(rows) if s["to_ms"] >= window[0] and s["from_ms"] < window[1] + 2000]
    for s in found:
        # a stall holding the end or the start of a long batch (give or take half a second) is that boundary
        i = bisect.bisect_left(edges, s["from_ms"] - 500)
        s["batch_edge_inside"] = i < len(edges) and edges[i] <= s["to_ms"] + 500
        s["pause_ms_inside"] = round(paused_ms(s["from_ms"], s["to_ms"]), 1)
        s["cause"] = ("batch boundary" if s["batch_edge_inside"]
                      else "JVM pause" if s["pause_ms_inside"] >= 0.5 * s["length_ms"] else "other")
        if s["batch_edge_inside"]:
            s["parts"] = boundary_parts(s, progress)
    stall_starts = [s["from_ms"] for s in found]

    # A late row is put down to the stall that covers most of its wait (due -> emitted).
    causes = {"batch boundary": 0, "JVM pause": 0, "other stall": 0, "no stall": 0}
    for _i, due, plan, _commit in counted:
        if plan - due < late_ms:
            continue
        overlaps = [(min(s["to_ms"], plan) - max(s["from_ms"], due), s)
                    for s in found[:bisect.bisect_left(stall_starts, plan)] if s["to_ms"] > due]
        best = max(overlaps, key=lambda o: o[0], default=None)
        if best is None or best[0] <= 0:
            causes["no stall"] += 1
        else:
            causes[{"batch boundary": "batch boundary", "JVM pause": "JVM pause"}.get(best[1]["cause"],
                                                                                      "other stall")] += 1
    late = sum(causes.values())
    tail_rows = sorted(counted, key=lambda r: r[3] - r[1])[-max(1, len(counted) // 100):]  # the slowest 1 %
    tail_source_share = (round(sum(r[2] - r[1] for r in tail_rows) / max(1, sum(r[3] - r[1] for r in tail_rows)), 3)
                         if tail_rows else None)
    summary_e2e = summarize(e2e)
    in_window = pauses_in(window[0], window[1])
    return {
        "path": path, "trigger": trigger, **settings, "window_ms": list(window),
        "window_starts_s_after_query_start": round((window[0] - settings["started_ms"]) / 1000, 1),
        "rows_due_in_window": expected, "rows_counted": len(counted), "clock": clock_name,
        "end_to_end": summary_e2e, "source_lateness": summarize(source), "sink_leg": summarize(sink),
        "p99_target_ms": P99_TARGET_MS,
        "p99_met": bool(summary_e2e.get("count")) and summary_e2e["p99"] <= P99_TARGET_MS
        and len(counted) == expected,
        "slowest_1pct_share_spent_before_the_sink": tail_source_share,
        "late_at_source": {"threshold_ms": late_ms, "rows": late,
                           "share_of_rows": round(late / len(counted), 4) if counted else None,
                           "by_cause": causes},
        "stalls": found, "batches": progress,
        "gc_pauses_in_window": {"count": len(in_window), "total_ms": round(sum(p[1] - p[0] for p in in_window), 1),
                                "longest_ms": round(max((p[1] - p[0] for p in in_window), default=0), 1)},
        "load_average_1m": load,
    }


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--triggers", default=",".join(TRIGGERS), help="real-time triggers, comma-separated")
    p.add_argument("--rate", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=30.0, help="seconds of input per point (default 30)")
    p.add_argument("--dwell-ms", type=int, default=5, help="sink flush interval (default 5 ms, as the sweep)")
    p.add_argument("--batch-rows", type=int, default=1000)
    p.add_argument("--quick", action="store_true", help="the JVM sink, 10 s trigger, 6 s of input")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    p.add_argument("--keep-logs", type=Path, default=None, help="keep the JVM and GC logs in this folder")
    p.add_argument("--from-json", type=Path, default=None,
                   help="run nothing: recompute the boundary breakdowns of this result file into --output")
    args = p.parse_args(argv)
    if args.from_json is not None:
        report = json.loads(args.from_json.read_text(encoding="utf-8"))
        for point in report["points"]:
            for stall in point["stalls"]:
                if stall["cause"] == "batch boundary":
                    stall["parts"] = boundary_parts(stall, point["batches"])
        args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        return 0
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    triggers = [x.strip() for x in args.triggers.split(",") if x.strip()]
    if args.quick:
        paths, triggers, args.seconds = ["rtm-jvm"], ["10 seconds"], 6.0
    if not paths or any(x not in PATHS for x in paths):
        p.error(f"--paths must be a subset of {','.join(PATHS)}")

    from pack_lab.interrupts import interrupts_raise
    from pack_lab.local_postgres import postgres_dsn
    from pack_lab.rate_source import rate_source_jars
    from pack_lab.rtm_lab import build_session
    from pack_lab.sink_clock import SERVER_SETTINGS
    from rtm_lakebase.foreach import foreach_jars
    from rtm_lakebase.jvm.sink import jvm_sink_jars

    points = []
    with interrupts_raise(), contextlib.ExitStack() as stack:
        if args.keep_logs:
            work = str(args.keep_logs)
            os.makedirs(work, exist_ok=True)
        else:
            work = tempfile.mkdtemp(prefix="tail-latency-")
            stack.callback(shutil.rmtree, work, True)
        gc_log = os.path.join(work, "gc.log")
        dsn = os.environ.get("PG_DSN") or stack.enter_context(postgres_dsn(settings=SERVER_SETTINGS))
        spark = build_session(cores=2, shuffle_partitions=1, app_name="tail-latency",
                              jars=rate_source_jars() + jvm_sink_jars() + foreach_jars(),
                              jvm_log=os.path.join(work, "jvm.log"),
                              extra_conf={"spark.driver.extraJavaOptions":
                                          f"-Xlog:gc,safepoint:file={gc_log}:time"})
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("OFF")
        load_start = round(os.getloadavg()[0], 2)
        for trigger in triggers:
            for path in paths:
                say(f"{path}, trigger {trigger}: {args.rate} rows/s for {args.seconds:g} s")
                point = run_point(spark, dsn, path, trigger, rate=args.rate, seconds=args.seconds,
                                  dwell_ms=args.dwell_ms, batch_rows=args.batch_rows, gc_log=gc_log)
                e, s, k = point["end_to_end"], point["source_lateness"], point["sink_leg"]
                say(f"  {point['rows_counted']}/{point['rows_due_in_window']} rows in the window; end to end p50 {e.get('p50')} p99 "
                    f"{e.get('p99')} max {e.get('max')} ms; source p99 {s.get('p99')}, sink p99 {k.get('p99')}; "
                    f"late rows {point['late_at_source']['by_cause']}; stalls "
                    f"{[(x['length_ms'], x['cause']) for x in point['stalls']]}; load {point['load_average_1m']}")
                points.append(point)
    report = {"benchmark": "tail_latency", "command": "benchmarks/tail_latency.py " + " ".join(argv or sys.argv[1:]),
              "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
              "spark_master": "local[2]", "nice": os.nice(0), "load_average_1m_at_start": load_start,
              "load_average_1m_at_end": round(os.getloadavg()[0], 2), "points": points}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    say(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
