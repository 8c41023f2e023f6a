"""Where the Python sink's write modes spend their time, now and at an older revision, side by side.

For the sink code of this checkout and of ``--revision`` (default ``960cbd4``, main as it stood on
2026-11-24, before the 2026-11-25 merges), each in its own child process, alternately, on one
Postgres:

1. **ratios**: every mode of ``benchmarks/sink_ratios.py`` (append, upsert, version-guarded upsert,
   unchanged replay) against a raw ``COPY`` timed in the same rounds (median of per-round ratios);
2. **per-call counts** (``cProfile``, deterministic, unaffected by load): calls per row on the thread
   that calls ``process()`` and on the flusher thread, and the functions with most calls;
3. **the server side**: ``EXPLAIN (ANALYZE, BUFFERS)`` of one flush statement of each keyed mode
   (rolled back), and with the script's own server ``pg_stat_statements``: the server's execution
   time per flush against the wall time per flush, i.e. how much of a flush is Postgres.

Run from the repository root (about 5-10 minutes on a loaded 2-core machine)::

    nice -n 10 .venv/bin/python benchmarks/sink_profile.py
    .venv/bin/python benchmarks/sink_profile.py --rows 5000 --rounds 1 --pairs 1 --output /tmp/p.json  # quick

Writes ``benchmarks/results/sink_profile.json``. Uses ``PG_DSN`` when set (then without
``pg_stat_statements`` unless that server loads it), otherwise a throwaway server.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "sink_profile.json"
#: main on 2026-11-24 (the last commit of 2026-11-23; the next merges came on 2026-11-25).
DEFAULT_REVISION = "960cbd4"
SERVER_SETTINGS = {"shared_preload_libraries": "pg_stat_statements", "track_commit_timestamp": "on"}


def say(message: str) -> None:
    print(f"[sink-profile {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ in the child
def _target_class():
    import rtm_lakebase

    if (Path(rtm_lakebase.__file__).parent / "sink").is_dir():
        from rtm_lakebase.sink.target import PostgresTarget
    else:
        from rtm_lakebase.sink_target import PostgresTarget
    return PostgresTarget


def _top(stats: pstats.Stats, rows: int, limit: int = 12) -> list[dict[str, Any]]:
    entries = []
    for (path, line, func), (_cc, ncalls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        where = path.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        entries.append({"function": f"{where}:{line}({func})", "calls_per_row": round(ncalls / rows, 3),
                        "tottime_s": round(tottime, 3)})
    entries.sort(key=lambda e: (-e["calls_per_row"], -e["tottime_s"]))
    return entries[:limit]


def profile_mode(bench, mode: str, stat_statements: bool) -> dict[str, Any]:
    """One run of ``mode`` under cProfile (both threads), with the server's own time when it can."""
    from sink_ratios import MODES

    _keywords, keyed, preload, _version = MODES[mode]
    bench.reset(keyed, preload)
    target_cls = _target_class()
    original = target_cls.write
    flusher = cProfile.Profile()

    def write(self, batch, by_timer):  # runs on the flusher thread
        flusher.enable()
        try:
            return original(self, batch, by_timer)
        finally:
            flusher.disable()

    target_cls.write = write
    if stat_statements:
        bench.conn.execute("SELECT pg_stat_statements_reset()")
    main = cProfile.Profile()
    started = time.perf_counter()
    try:
        main.enable()
        bench.through_sink(mode)
        main.disable()
    finally:
        target_cls.write = original
    wall = time.perf_counter() - started
    n = bench.n
    out: dict[str, Any] = {"wall_s": round(wall, 3)}
    for name, prof in (("process_thread", main), ("flusher_thread", flusher)):
        stats = pstats.Stats(prof)
        out[name] = {"calls_per_row": round(stats.total_calls / n, 2),  # type: ignore[attr-defined]
                     "profiled_s": round(stats.total_tt, 3), "top": _top(stats, n)}  # type: ignore[attr-defined]
    if stat_statements:
        rows = bench.conn.execute(
            "SELECT calls, total_exec_time, total_plan_time, shared_blks_hit, shared_blks_read, shared_blks_dirtied, "
            "left(query, 60) FROM pg_stat_statements WHERE query ~* '^(INSERT|COPY)' AND query ~ %s",
            (bench.table,)).fetchall()
        calls = sum(r[0] for r in rows)
        server_ms = sum(r[1] + r[2] for r in rows)
        out["server"] = {"statements": calls, "server_ms": round(server_ms, 1),
                         "server_share_of_wall": round(server_ms / 1000 / wall, 3) if wall else None,
                         "shared_blks_hit": sum(r[3] for r in rows), "shared_blks_read": sum(r[4] for r in rows),
                         "shared_blks_dirtied": sum(r[5] for r in rows), "queries": [r[6] for r in rows]}
    return out


def explain_mode(bench, mode: str) -> dict[str, Any]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the statement the sink runs for one flush of ``mode``, rolled back."""
    from sink_ratios import MODES

    _keywords, keyed, preload, version = MODES[mode]
    bench.reset(keyed, preload)
    writer = bench.writer_cls(bench.dsn, bench.settings_cls(
        table=bench.table, columns=bench.columns, max_batch_rows=bench.batch, max_dwell_ms=0,
        **MODES[mode][0]))
    writer.open(0, 0)
    writer.process(bench.data[version][0])  # builds the statement
    statement = writer._target._statement
    writer.close(RuntimeError("explain only"))  # drops the buffered row
    batch = bench.data[version][:bench.batch]
    arrays = [list(column) for column in zip(*batch, strict=True)]
    conn = bench.conn
    text = statement if isinstance(statement, bytes) else statement.as_bytes(conn)
    with conn.transaction(force_rollback=True):
        plan = [r[0] for r in conn.execute(b"EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + text, arrays).fetchall()]
    return {"statement": text.decode(), "plan": plan}


def conversion_cost(bench) -> dict[str, Any] | None:
    """CPU µs per value of the converter the sink applies to each column (where it has one), on one flush's values.

    The median of 31 repetitions over ``bench.batch`` values: single-threaded and short, so load moves it less
    than the whole runs. Only for sink code that converts values (``_convert``, since 2026-11-25).
    """
    writer = bench.writer_cls(bench.dsn, bench.settings_cls(table=bench.table, columns=bench.columns,
                                                            max_batch_rows=bench.batch, max_dwell_ms=0))
    bench.reset(True, None)
    writer.open(0, 0)
    try:
        writer.process(bench.data[1][0])  # prepares the statement and the converters
        converters = getattr(writer._target, "_convert", None)
    finally:
        writer.close(RuntimeError("measuring only"))
    if not converters:
        return None
    out = {}
    for i, convert in enumerate(converters):
        column = [row[i] for row in bench.data[1][:bench.batch]]
        if convert is None:
            continue
        runs = []
        for _ in range(31):
            started = time.process_time()
            for value in column:
                convert(value)
            runs.append((time.process_time() - started) / len(column) * 1e6)
        out[bench.columns[i]] = round(statistics.median(runs), 3)
    return out


def child(code_dir: str, dsn: str, rows: int, batch: int, rounds: int, profile: bool,
          shape: str) -> dict[str, Any]:
    sys.path.insert(0, code_dir)  # this revision's rtm_lakebase first
    # an editable install's finder maps rtm_lakebase.* to the checkout: drop it, so only code_dir is imported
    sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")]
    sys.path.insert(1, str(ROOT / "benchmarks"))
    from sink_ratios import MODES, Bench, measure

    import rtm_lakebase

    result: dict[str, Any] = {"code": str(Path(rtm_lakebase.__file__).parent)}
    result["ratios"] = measure(dsn, rows, batch, rounds, shape=shape)
    if profile:
        bench = Bench(dsn, rows, batch, shape=shape)
        try:
            try:
                bench.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                bench.conn.execute("SELECT pg_stat_statements_reset()")
                stat_statements = True
            except Exception:
                stat_statements = False
            result["profile"] = {mode: profile_mode(bench, mode, stat_statements) for mode in MODES}
            result["explain"] = {mode: explain_mode(bench, mode) for mode in MODES if mode != "append"}
        finally:
            bench.close()
    if shape != "narrow":  # every child: the converters' own cost, per column
        bench = Bench(dsn, rows, batch, shape=shape)
        try:
            result["conversion_cpu_us_per_value"] = conversion_cost(bench)
        finally:
            bench.close()
    return result


# ------------------------------------------------------------------ the parent
def export_revision(revision: str, into: str) -> str:
    """``rtm_lakebase/`` of ``revision`` (``git archive``) under ``into``."""
    archive = os.path.join(into, "code.tar")
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", archive, revision, "rtm_lakebase"],
                   check=True, capture_output=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into


def run_child(code_dir: str, dsn: str, args: argparse.Namespace, profile: bool) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", code_dir, "--dsn", dsn, "--rows", str(args.rows),
                          "--batch", str(args.batch), "--rounds", str(args.rounds), "--shape", args.shape]
                         + (["--profile"] if profile else []),
                         capture_output=True, text=True, cwd=str(ROOT), env={**os.environ, "PYTHONPATH": ""})
    if out.returncode != 0:
        raise RuntimeError(f"child for {code_dir} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout)


def compare(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    from sink_ratios import MODES

    with tempfile.TemporaryDirectory(prefix="sink-profile-") as tmp:
        versions = {"current": str(ROOT), args.revision: export_revision(args.revision, tmp)}
        runs: dict[str, list[dict[str, Any]]] = {v: [] for v in versions}
        load = [round(os.getloadavg()[0], 2)]
        for pair in range(args.pairs):
            order = list(versions) if pair % 2 == 0 else list(reversed(versions))  # alternate who goes first
            for version in order:
                say(f"pair {pair + 1}/{args.pairs}: {version} ({args.rows:,} rows, {args.rounds} rounds)")
                run = run_child(versions[version], dsn, args, profile=pair == 0)
                say("  " + ", ".join(f"{m} {run['ratios']['modes'][m]['ratio']:.3f}x, client "
                                     f"{run['ratios']['modes'][m]['client_cpu_us_per_row']} us/row" for m in MODES))
                runs[version].append(run)
            load.append(round(os.getloadavg()[0], 2))
    summary: dict[str, Any] = {}
    for version, vruns in runs.items():
        summary[version] = {}
        for m in ("copy", "keyed_copy", *MODES):
            entries = [r["ratios"]["modes"][m] for r in vruns]
            server = [e["server_cpu_us_per_row"] for e in entries if e["server_cpu_us_per_row"] is not None]
            summary[version][m] = {
                "client_cpu_us_per_row": round(statistics.median(e["client_cpu_us_per_row"] for e in entries), 2),
                "server_cpu_us_per_row": round(statistics.median(server), 2) if server else None}
            if m in MODES:
                summary[version][m].update(median_ratio=round(statistics.median(e["ratio"] for e in entries), 3),
                                           per_child=[e["ratio"] for e in entries])
    current, old = summary["current"], summary[args.revision]
    change = {m: {"ratio": round(current[m]["median_ratio"] / old[m]["median_ratio"], 3),
                  "client_cpu": round(current[m]["client_cpu_us_per_row"] / old[m]["client_cpu_us_per_row"], 3),
                  "server_cpu": (round(current[m]["server_cpu_us_per_row"] / old[m]["server_cpu_us_per_row"], 3)
                                 if current[m]["server_cpu_us_per_row"] and old[m]["server_cpu_us_per_row"] else None)}
              for m in MODES}
    return {"benchmark": "sink_profile", "revision": args.revision, "shape": args.shape,
            "command": "benchmarks/sink_profile.py " + " ".join(sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load_average_1m": load,
            "note": "shared 2-core machine (see load_average_1m); each child times every mode against COPY in "
                    "interleaved rounds, the two revisions' children alternate; call counts are deterministic",
            "summary": summary, "current_over_revision": change,
            "conversion_cpu_us_per_value": {v: [r.get("conversion_cpu_us_per_value") for r in runs[v]] for v in runs},
            "profiles": {v: runs[v][0].get("profile") for v in runs},
            "explain": {v: runs[v][0].get("explain") for v in runs}, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--revision", default=DEFAULT_REVISION, help=f"git revision to compare with ({DEFAULT_REVISION})")
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per child (default 3)")
    p.add_argument("--pairs", type=int, default=2, help="children per revision, alternating (default 2)")
    p.add_argument("--shape", default="narrow", help="row shape of sink_ratios.py: narrow or typed")
    p.add_argument("--dsn", default=None)
    p.add_argument("--output", default=str(DEFAULT_OUTPUT))
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.dsn, args.rows, args.batch, args.rounds, args.profile,
                               args.shape)))
        return 0
    import contextlib

    from pack_lab.local_postgres import postgres_dsn

    with (contextlib.nullcontext(args.dsn) if args.dsn else postgres_dsn(SERVER_SETTINGS)) as dsn:
        report = compare(args, dsn)
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for m in report["current_over_revision"]:
        now, then = report["summary"]["current"][m], report["summary"][args.revision][m]
        say(f"{m}: x COPY {now['median_ratio']:.3f} now, {then['median_ratio']:.3f} at {args.revision}; client CPU "
            f"{now['client_cpu_us_per_row']} vs {then['client_cpu_us_per_row']} us/row; server CPU "
            f"{now['server_cpu_us_per_row']} vs {then['server_cpu_us_per_row']} us/row")
    say(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
