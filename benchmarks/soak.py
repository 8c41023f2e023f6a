"""Soak: the sinks on a Spark standalone cluster for a long run, with a fault every few minutes.

Starts its own cluster (a master, two workers; ``pack_lab/standalone_cluster.py``),
a throwaway Postgres, and a loopback TCP proxy in front of it (``pack_lab/tcp_proxy.py``).
This process is the Spark driver. Each sink path gets its own source (``--source rate``, the default: the lab's
deterministic rate source, rows computed from their ids, none held; ``memory``: Spark's ``LowLatencyMemoryStream``
fed row by row, which slows as it holds more), table and checkpoint; ``--rate`` rows/s (default 1,000) are split evenly over the paths; every ``--fault-every`` seconds one
fault is injected, rotating:

1. ``worker_kill``: the process group of the worker running the sink tasks (worker, executor, Python workers) gets
   SIGKILL; a fresh worker starts in its place ``--worker-down`` seconds later;
2. ``postgres_restart``: Postgres stops (fast) and starts again after 5 s;
3. ``network_drop``: the proxy resets every connection and refuses new ones for 10 s.

A supervisor restarts any query that dies from its checkpoint (the recovery recipe
of ``references/real-time-mode.md``). At the end feeding stops, the tables drain, and the
JSON records rows lost and duplicated per path (both must be 0), sink-visible latency
percentiles per window, executor and Python-worker memory (RSS from /proc) and
Postgres connections per path (``pg_stat_activity``) every ``--sample-every`` seconds
with their least-squares slopes, every fault and query failure, and the load average.

    nice -n 10 .venv/bin/python benchmarks/soak.py                    # 30 min, ~35 min with start and drain
    .venv/bin/python benchmarks/soak.py --minutes 3 --fault-every 45 --out /tmp/soak.json   # CI version

Exit status 1 when a row is lost or duplicated, 2 on bad arguments or environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "benchmarks" / "results"
FAULTS = ("worker_kill", "postgres_restart", "network_drop")


def say(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- process memory ------------------------------------------------------------------------------

def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def memory_sample(cluster) -> dict[str, Any]:
    """RSS (MB) of each worker's executor JVM and of the Python workers under it."""
    out: dict[str, Any] = {}
    for index in range(cluster.workers):
        executor = python = 0.0
        python_count = 0
        for pid in cluster.worker_pids(index):
            cmd = _cmdline(pid)
            rss = _rss_mb(pid) or 0.0
            if "CoarseGrainedExecutorBackend" in cmd:
                executor += rss
            elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd or "pyspark/daemon" in cmd:
                python += rss
                python_count += 1
        out[f"worker{index}"] = {"executor_rss_mb": round(executor, 1), "python_rss_mb": round(python, 1),
                                 "python_processes": python_count}
    return out


def slope_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return None
    return round(60 * sum((t - mx) * (v - my) for t, v in points) / var, 3)


# -- the run ---------------------------------------------------------------------------------------

class Sampler(threading.Thread):
    def __init__(self, cluster, monitor_dsn: str, paths: list[str], every_s: float, t0: float):
        super().__init__(name="sampler", daemon=True)
        self.cluster, self.dsn, self.paths, self.every_s, self.t0 = cluster, monitor_dsn, paths, every_s, t0
        self.samples: list[dict[str, Any]] = []
        self.halt = threading.Event()

    def connections(self) -> dict[str, int] | None:
        import psycopg

        from pack_lab.cluster_stream import app_name

        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                 application_name="rtm-soak-monitor") as conn:
                rows = dict(conn.execute("SELECT application_name, count(*) FROM pg_stat_activity "
                                         "WHERE backend_type = 'client backend' GROUP BY 1").fetchall())
        except Exception:
            return None
        return {p: int(rows.get(app_name(p), 0)) for p in self.paths}

    def run(self) -> None:
        while not self.halt.wait(self.every_s):
            self.samples.append({"t_s": round(time.monotonic() - self.t0, 1),
                                 "load1": round(os.getloadavg()[0], 2),
                                 "memory": memory_sample(self.cluster),
                                 "connections": self.connections()})


def summarise(samples: list[dict[str, Any]], paths: list[str], workers: int) -> dict[str, Any]:
    series: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        for w in range(workers):
            mem = s["memory"][f"worker{w}"]
            if mem["executor_rss_mb"]:
                series.setdefault(f"worker{w}.executor_rss_mb", []).append((s["t_s"], mem["executor_rss_mb"]))
            if mem["python_processes"]:
                series.setdefault(f"worker{w}.python_rss_mb", []).append((s["t_s"], mem["python_rss_mb"]))
        if s["connections"] is not None:
            for p in paths:
                series.setdefault(f"connections.{p}", []).append((s["t_s"], s["connections"][p]))
    out = {}
    for name, pts in sorted(series.items()):
        values = [v for _, v in pts]
        out[name] = {"first": values[0], "last": values[-1], "min": min(values), "max": max(values),
                     "slope_per_min": slope_per_min(pts), "samples": len(pts)}
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The soak in a fresh work folder, removed after an exact run (kept, and named, otherwise)."""
    paths = args.paths
    per_path_rate = max(1, round(args.rate / len(paths)))
    work = Path(tempfile.mkdtemp(prefix="rtm-soak-"))
    exact = False
    try:
        result = _run(args, work, paths, per_path_rate)
        exact = result["drained"] and result["lost_total"] == 0 and result["duplicated_total"] == 0
        return result
    finally:
        if exact and not args.keep_work:
            shutil.rmtree(work, ignore_errors=True)
        else:  # something went wrong: the logs and checkpoints are what tells why
            say(f"logs and checkpoints kept in {work} (delete it when done)")


def _run(args: argparse.Namespace, work: Path, paths: list[str], per_path_rate: int) -> dict[str, Any]:
    import psycopg

    from pack_lab.cluster_stream import (
        PathRun,
        RatePlan,
        cluster_session,
        scheduler_log,
        start_rows,
        table_ddl,
        table_report,
        wait_for_rows,
    )
    from pack_lab.local_postgres import EmbeddedPostgres
    from pack_lab.sink_clock import SERVER_SETTINGS
    from pack_lab.standalone_cluster import StandaloneCluster
    from pack_lab.tcp_proxy import TcpProxy

    say(f"starting Postgres, a proxy and a standalone cluster (2 workers × {args.cores} cores); work dir {work}")
    load_before = os.getloadavg()
    with EmbeddedPostgres(settings=SERVER_SETTINGS, log=say) as pg, TcpProxy(pg.port) as proxy, \
            StandaloneCluster(workers=2, cores_per_worker=args.cores, log=say) as cluster:
        cluster.keep_logs_in = work
        sink_dsn = f"host=127.0.0.1 port={proxy.port} user={pg.user} dbname={pg.database} connect_timeout=10"
        tables = {p: f"soak_{p}" for p in paths}
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            for table in tables.values():
                conn.execute(table_ddl(table))
        spark = cluster_session(cluster.session_conf(executor_memory=args.executor_memory),
                                app="rtm-soak", jvm_log=str(work / "driver-jvm.log"), source=args.source,
                                paths=paths)
        t0 = time.monotonic()
        plan = RatePlan.starting_soon(per_path_rate, args.minutes * 60) if args.source == "rate" else None
        runs = [PathRun(spark, p, sink_dsn, tables[p], str(work / f"ck-{p}"), trigger_s=args.trigger_seconds,
                        t0=t0, source_kind=args.source, plan=plan) for p in paths]
        faults: list[dict[str, Any]] = []
        sampler = Sampler(cluster, pg.dsn, paths, args.sample_every, t0)
        try:
            for r in runs:
                r.start()
            t0_ms = plan.start_ms if plan else int(time.time() * 1000)
            feeder = start_rows(runs, per_path_rate, args.minutes * 60)
            sampler.start()
            next_fault = args.fault_every
            fault_index = 0
            worker_back_at = None
            last_report = 0.0
            while feeder.is_alive():
                now = time.monotonic() - t0
                for r in runs:
                    if r.supervise():
                        say(f"{r.path}: query failed, restarted from its checkpoint ({r.events[-2].detail[:160]})")
                if worker_back_at is not None and now >= worker_back_at:
                    victim = next(f["worker"] for f in reversed(faults) if f["fault"] == "worker_kill")
                    cluster.start_worker(victim)
                    faults[-1]["worker_back_s"] = round(time.monotonic() - t0, 1)
                    say(f"worker {victim} is back")
                    worker_back_at = None
                if args.fault_every and now >= next_fault and now < args.minutes * 60 - 20:
                    kind = args.faults[fault_index % len(args.faults)]
                    fault_index += 1
                    next_fault += args.fault_every
                    record: dict[str, Any] = {"t_s": round(now, 1), "fault": kind}
                    if kind == "worker_kill":  # the worker running the sink tasks
                        victim = cluster.busiest_worker(proxy.port)
                        record["worker"] = victim
                        record["sink_connections_on_it"] = cluster.sockets_to(proxy.port).get(victim, 0)
                        record["processes_killed"] = cluster.kill_worker(victim)
                        worker_back_at = now + args.worker_down
                    elif kind == "postgres_restart":
                        pg.restart(down_seconds=5)
                    else:
                        record["connections_cut"] = proxy.drop(10)
                    record["done_s"] = round(time.monotonic() - t0, 1)
                    faults.append(record)
                    say(f"fault {fault_index}: {kind} {record}")
                if now - last_report >= 30:
                    last_report = now
                    say(f"{now:5.0f} s: {feeder.sent} rows/path sent; restarts "
                        f"{ {r.path: r.restarts for r in runs} }; load {os.getloadavg()[0]:.2f}")
                feeder.join(timeout=1.0)
            if worker_back_at is not None:
                cluster.start_worker(next(f["worker"] for f in reversed(faults) if f["fault"] == "worker_kill"))
            if feeder.error is not None:
                raise RuntimeError(f"feeding the source failed: {feeder.error}")
            say(f"fed {feeder.sent} rows per path; draining")

            def supervise_all() -> None:
                for r in runs:
                    r.supervise()

            drained = wait_for_rows(lambda: psycopg.connect(pg.dsn, autocommit=True, connect_timeout=5),
                                    tables, feeder.sent, args.drain_timeout, supervise_all)
            sampler.halt.set()
            sampler.join(timeout=30)
            with psycopg.connect(pg.dsn, autocommit=True) as conn:
                reports = {p: table_report(conn, tables[p], feeder.sent, window_s=args.window, t0_ms=t0_ms)
                           for p in paths}
        finally:
            sampler.halt.set()
            for r in runs:
                r.stop()
            with contextlib.suppress(Exception):
                spark.stop()
    load_after = os.getloadavg()
    return {
        "benchmark": "soak",
        "command": "benchmarks/soak.py " + " ".join(sys.argv[1:]),
        "settings": {"minutes": args.minutes, "source": args.source, "rate_rows_per_s": args.rate,
                     "rate_rows_per_s_per_path": per_path_rate, "paths": paths,
                     "fault_every_s": args.fault_every, "faults": args.faults, "window_s": args.window,
                     "trigger_s": args.trigger_seconds, "workers": 2, "cores_per_worker": args.cores,
                     "executor_memory": args.executor_memory, "sample_every_s": args.sample_every},
        "machine": {"cpus": os.cpu_count(), "load_avg_before": [round(x, 2) for x in load_before],
                    "load_avg_after": [round(x, 2) for x in load_after],
                    "load1_mean_during": round(sum(s["load1"] for s in sampler.samples)
                                               / max(1, len(sampler.samples)), 2)},
        "rows_per_path": feeder.sent,
        "drained": drained,
        "paths": reports,
        "lost_total": sum(r["missing"] for r in reports.values()),
        "duplicated_total": sum(r["duplicated"] for r in reports.values()),
        "faults": faults,
        "query_events": [e.as_dict() for r in runs for e in r.events],
        "restarts": {r.path: r.restarts for r in runs},
        "scheduler": scheduler_log(work / "driver-jvm.log"),
        "proxy": {"connections_total": proxy.connections_total, "drops": proxy.drops},
        "trends": summarise(sampler.samples, paths, 2),
        "samples": sampler.samples,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from pack_lab.cluster_stream import PATHS, SOURCES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="feeding time (default 30)")
    p.add_argument("--rate", type=int, default=1000, help="rows/s into the cluster, split evenly over the paths (default 1000)")
    p.add_argument("--paths", default="rtm_jvm,rtm_python", help=f"comma-separated, from {','.join(PATHS)}")
    p.add_argument("--fault-every", type=float, default=300.0, help="seconds between faults (0: none)")
    p.add_argument("--faults", default=",".join(FAULTS), help="rotation order")
    p.add_argument("--worker-down", type=float, default=30.0, help="seconds before a killed worker is replaced")
    p.add_argument("--window", type=float, default=300.0, help="latency window (s), default 300")
    p.add_argument("--sample-every", type=float, default=10.0)
    p.add_argument("--trigger-seconds", type=int, default=30, help="real-time trigger (checkpoint interval)")
    p.add_argument("--cores", type=int, default=3, help="cores per worker")
    p.add_argument("--executor-memory", default="768m")
    p.add_argument("--drain-timeout", type=float, default=300.0)
    p.add_argument("--keep-work", action="store_true",
                   help="keep the work folder (cluster logs, checkpoints) after an exact run too")
    p.add_argument("--source", choices=SOURCES, default="rate",
                   help="rate: the lab's deterministic rate source (pack_lab/rate_source.py, default); "
                        "memory: Spark's LowLatencyMemoryStream, fed row by row (slows as it holds more)")
    p.add_argument("--out", help="JSON path (default benchmarks/results/soak.json for a 30-minute run, "
                                 "else soak-<minutes>min.json)")
    args = p.parse_args(argv)
    args.paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    args.faults = [x.strip() for x in args.faults.split(",") if x.strip()]
    if not args.paths or any(x not in PATHS for x in args.paths):
        p.error(f"--paths must name some of {','.join(PATHS)}")
    if not args.faults or any(x not in FAULTS for x in args.faults):
        p.error(f"--faults must name some of {','.join(FAULTS)}")
    if args.minutes <= 0 or args.rate < 1 or args.window <= 0 or args.sample_every <= 0:
        p.error("--minutes, --rate, --window and --sample-every must be positive")
    if args.trigger_seconds < 5:
        p.error("--trigger-seconds must be at least 5 (Spark's minimum real-time trigger)")
    if args.out is None:
        name = "soak.json" if args.minutes >= 30 else f"soak-{args.minutes:g}min.json"
        args.out = str(RESULTS / name)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pack_lab.interrupts import Interrupted, interrupts_raise

    try:
        with interrupts_raise():
            result = run(args)
    except Interrupted as exc:
        say(f"interrupted ({exc}); everything started was stopped")
        return exc.exit_code
    except Exception as exc:
        say(f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    say(f"wrote {args.out}")
    for path, rep in result["paths"].items():
        lat = rep["latency_ms"]
        say(f"{path}: {rep['rows']}/{rep['expected']} rows, lost {rep['missing']}, duplicated {rep['duplicated']}, "
            f"visible latency p50 {lat['p50']} p99 {lat['p99']} max {lat['max']} ms")
    for name, t in result["trends"].items():
        say(f"{name}: {t['first']} → {t['last']} (min {t['min']}, max {t['max']}), slope {t['slope_per_min']}/min")
    if args.out.endswith("soak.json") or Path(args.out).parent == RESULTS:
        with contextlib.suppress(Exception):
            from benchmarks.charts import render_soak

            say(f"chart: {render_soak(result, Path(args.out).with_suffix('.png'))}")
    return 0 if result["lost_total"] == 0 and result["duplicated_total"] == 0 and result["drained"] else 1


if __name__ == "__main__":
    sys.exit(main())
