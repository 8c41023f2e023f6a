"""Charts (PNG) drawn from the benchmarks' JSON results, byte-for-byte reproducible.

Each chart is a pure function of one JSON file, so a test can redraw it and
compare it with the committed PNG. Run ``python benchmarks/charts.py`` to
redraw every chart in ``benchmarks/results/`` after a benchmark run
(``rate_sweep.py`` draws its own; ``tests/test_charts.py`` fails on a stale
chart). Reproducible output: the Agg renderer,
the DejaVu Sans font that ships with matplotlib, fixed size and resolution,
and no timestamp or software tag in the PNG metadata.

- ``rate_sweep.json`` → ``rate_sweep.png``: sink-visible latency percentiles
  against input rate, one line per sink path;
- ``foreach_latency.json`` → ``foreach_latency.png``: end-to-end p50 and p99 per case;
- ``sink_benchmark.json`` → ``sink_benchmark.png``: rows/s of each writer;
- ``soak.json`` → ``soak.png``: latency per window, memory and connections over a soak;
- ``kafka_workload.json`` → ``kafka_workload.png``: Kafka → Spark → Postgres latency and rates per path.

The demo's chart is drawn by ``pack_lab/charts.py`` with the same primitives.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pack_lab.charts import PATH_STYLE, log_axis_ms, pyplot, save

RESULTS = Path(__file__).resolve().parent / "results"

# ------------------------------------------------------------------ rate sweep


def render_rate_sweep(results: Mapping[str, Any], out: Path) -> Path:
    """Sink-visible p50, p95 and p99 (ms, log) against offered rate (rows/s, log), a line per path."""
    plt = pyplot()
    quantiles = ("p50", "p95", "p99")
    fig, axes = plt.subplots(1, len(quantiles), figsize=(12, 4.2), sharey=True)
    target = results.get("target", {})
    for ax, q in zip(axes, quantiles, strict=True):
        for path, (colour, label) in PATH_STYLE.items():
            points = [p for p in results.get("points", []) if p["path"] == path and "visible" in p
                      and q in p["visible"]]
            points.sort(key=lambda p: p["offered_rows_per_s"])
            if not points:
                continue
            xs = [p["offered_rows_per_s"] for p in points]
            ys = [max(p["visible"][q], 1) for p in points]
            ax.plot(xs, ys, marker="o", color=colour, label=label, linewidth=1.6)
        limit = target.get(f"{q}_ms")
        if limit:
            ax.axhline(limit, color="#555555", linestyle="--", linewidth=0.9)
            ax.annotate(f"target {q} ≤ {limit:g} ms (JVM, {target.get('rate', 1000):g}/s)",
                        xy=(0.02, limit), xycoords=("axes fraction", "data"),
                        xytext=(0, 3), textcoords="offset points", fontsize=7, color="#555555")
        log_axis_ms(ax, "x")
        log_axis_ms(ax, "y")
        ax.set_title(f"sink-visible latency {q}")
        ax.set_xlabel("offered input rate (rows/s)")
        ax.grid(True, which="major", linewidth=0.4, alpha=0.6)
    axes[0].set_ylabel("sent → visible in Postgres (ms, log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels) or 1, fontsize=8, frameon=False)
    machine = results.get("machine", {})
    fig.suptitle(f"Rate sweep into Postgres — {machine.get('cores', '?')} cores, "
                 f"{machine.get('spark_master', '')}, pyspark {machine.get('pyspark', '?')}, "
                 f"trigger {results.get('trigger', '?')} ({results.get('date', '')})", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save(fig, out)


# ------------------------------------------------------------------ kafka workload


def render_kafka_workload(results: Mapping[str, Any], out: Path) -> Path:
    """Kafka → Spark → Postgres: sink-visible p50/p95/p99 per paced run (log), beside the seed's p50/p95,
    and offered vs sustained rate per run with each path's measured capacity."""
    plt = pyplot()
    runs = [(entry["path"], run) for entry in results.get("paths", []) for run in entry.get("runs", [])
            if "visible" in run and run["visible"].get("count")]
    fig, (lat, rate) = plt.subplots(1, 2, figsize=(12, 4.4))
    short = {"rtm-jvm": "RTM + JVM sink", "rtm-fast-foreach": "RTM + fast\nPython foreach",
             "microbatch": "micro-batch +\nPython foreach"}
    labels = [f"{short.get(path, path)}\n@ {run['rate']:,}/s" for path, run in runs]
    xs = list(range(len(runs)))
    for offset, q, alpha in ((-0.25, "p50", 1.0), (0.0, "p95", 0.7), (0.25, "p99", 0.45)):
        lat.bar([x + offset for x in xs], [max(run["visible"][q], 1) for _, run in runs], width=0.24,
                color=[PATH_STYLE.get(path, ("#777777", ""))[0] for path, _ in runs], alpha=alpha,
                label=q)
    seed = results.get("seed", {})
    for q, style in (("p50", ":"), ("p95", "--")):
        if seed.get(f"{q}_ms"):
            lat.axhline(seed[f"{q}_ms"], color="#555555", linestyle=style, linewidth=0.9)
            lat.annotate(f"seed {q} {seed[f'{q}_ms']} ms (Databricks, {seed.get('rate', 0):,}/s)",
                         xy=(0.99, seed[f"{q}_ms"]), xycoords=("axes fraction", "data"), xytext=(0, 3),
                         textcoords="offset points", fontsize=7, color="#555555", ha="right")
    log_axis_ms(lat, "y")
    from matplotlib.ticker import NullFormatter

    lat.yaxis.set_minor_formatter(NullFormatter())
    lat.set_xticks(xs, labels, fontsize=7)
    lat.set_ylabel("produce → visible in Postgres (ms, log scale)")
    lat.set_title("sink-visible latency per paced run (bars: p50, p95, p99)")
    lat.grid(True, axis="y", linewidth=0.4, alpha=0.6)
    offered = [run["offered_rows_per_s"] for _, run in runs]
    sustained = [run["sustained_rows_per_s"] for _, run in runs]
    rate.bar([x - 0.2 for x in xs], offered, width=0.4, color="#bbbbbb", label="offered")
    rate.bar([x + 0.2 for x in xs], sustained, width=0.4,
             color=[PATH_STYLE.get(path, ("#777777", ""))[0] for path, _ in runs], label="sustained")
    for x, (path, run) in zip(xs, runs, strict=True):
        capacity = next((e.get("capacity", {}).get("rows_per_s") for e in results["paths"] if e["path"] == path),
                        None)
        if capacity:
            rate.plot([x - 0.4, x + 0.4], [capacity, capacity], color="#333333", linewidth=1.2)
        rate.annotate("kept up" if run.get("sustained") else "fell behind", xy=(x + 0.2, run["sustained_rows_per_s"]),
                      xytext=(0, 3), textcoords="offset points", ha="center", fontsize=7)
    rate.set_xticks(xs, labels, fontsize=7)
    rate.set_ylabel("rows per second")
    rate.set_title("offered vs sustained (black line: capacity from a backlog)")
    rate.grid(True, axis="y", linewidth=0.4, alpha=0.6)
    rate.legend(fontsize=8, frameon=False, loc="upper right")
    machine, setup = results.get("machine", {}), results.get("setup", {})
    fig.suptitle(f"Kafka → Spark → Postgres on {machine.get('cores', '?')} cores shared by broker, Spark and "
                 f"Postgres — {setup.get('kafka_partitions', '?')} partition(s), real-time trigger "
                 f"{setup.get('trigger_realtime', '?')}, load average {machine.get('load_average_1m_at_start', '?')}"
                 f"→{machine.get('load_average_1m_at_end', '?')} ({results.get('date', '')})", fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return save(fig, out)


# ------------------------------------------------------------------ foreach latency


def render_foreach_latency(results: Mapping[str, Any], out: Path) -> Path:
    """End-to-end (source → sink) p50 and p99 per case, horizontal bars on a log axis."""
    plt = pyplot()
    cases = [c for c in results.get("cases", []) if "report" in c]
    names = [c["name"] for c in cases]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(cases) + 1.4))
    ys = list(range(len(cases)))
    p50 = [max(c["report"]["source_to_sink"].get("p50", 0), 1) for c in cases]
    p99 = [max(c["report"]["source_to_sink"].get("p99", 0), 1) for c in cases]
    ax.barh([y + 0.2 for y in ys], p99, height=0.4, color="#f4a582", label="p99")
    ax.barh([y - 0.2 for y in ys], p50, height=0.4, color="#b2182b", label="p50")
    ax.set_yticks(ys, names)
    ax.invert_yaxis()
    log_axis_ms(ax, "x")
    ax.set_xlabel("source → sink latency (ms, log scale)")
    ax.grid(True, axis="x", linewidth=0.4, alpha=0.6)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_title(f"foreach latency under real-time mode vs micro-batch ({results.get('date', '')})")
    fig.tight_layout()
    return save(fig, out)


# ------------------------------------------------------------------ sink throughput


def render_sink_benchmark(results: Mapping[str, Any], out: Path) -> Path:
    """Rows per second of every direct writer, as a share of raw ``COPY``."""
    plt = pyplot()
    direct = list(results.get("direct", []))
    fig, ax = plt.subplots(figsize=(9, 0.34 * len(direct) + 1.4))
    ys = list(range(len(direct)))
    rates = [max(d["rows_per_s"], 1) for d in direct]
    ax.barh(ys, rates, height=0.6, color=["#4d4d4d" if "raw COPY" in d["name"] else "#2166ac"
                                          for d in direct])
    for y, d in zip(ys, direct, strict=True):
        ax.annotate(f"{d['rows_per_s']:,.0f}/s ({d['ratio_to_copy']:.2f}× COPY)", xy=(d["rows_per_s"], y),
                    xytext=(3, 0), textcoords="offset points", va="center", fontsize=7)
    ax.set_yticks(ys, [d["name"] for d in direct])
    ax.invert_yaxis()
    log_axis_ms(ax, "x")
    ax.set_xlim(right=max(rates) * 8)
    ax.set_xlabel("rows per second (log scale)")
    ax.grid(True, axis="x", linewidth=0.4, alpha=0.6)
    rows = results.get("args", {}).get("rows", "?")
    ax.set_title(f"Writing {rows:,} rows into local Postgres, one connection" if isinstance(rows, int)
                 else "Writing rows into local Postgres, one connection")
    fig.tight_layout()
    return save(fig, out)


# ------------------------------------------------------------------ soak


SOAK_STYLE = {"rtm_jvm": PATH_STYLE["rtm-jvm"], "rtm_python": PATH_STYLE["rtm-python"],
              "mb_python": PATH_STYLE["microbatch"]}


def render_soak(results: Mapping[str, Any], out: Path) -> Path:
    """Three panels over the soak's time: p50/p99 latency per window, executor and Python RSS, connections."""
    plt = pyplot()
    fig, (lat, mem, conns) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    window = results["settings"]["window_s"]
    for path, rep in results["paths"].items():
        colour, label = SOAK_STYLE.get(path, ("#333333", path))
        ws = [w for w in rep.get("latency_windows", []) if w["p50"] is not None]
        xs = [(w["window"] + 0.5) * window / 60 for w in ws]
        lat.plot(xs, [max(w["p50"], 1) for w in ws], marker="o", color=colour, label=f"{label} p50")
        lat.plot(xs, [max(w["p99"], 1) for w in ws], marker="^", linestyle="--", color=colour, label=f"{label} p99")
    log_axis_ms(lat)
    lat.set_ylabel("visible latency (ms, log)")
    lat.legend(fontsize=7, frameon=False)
    samples = results.get("samples", [])
    ts = [s["t_s"] / 60 for s in samples]
    workers = sorted({w for s in samples for w in s["memory"]})
    for i, w in enumerate(workers):
        mem.plot(ts, [s["memory"][w]["executor_rss_mb"] for s in samples], color=["#1b7837", "#762a83"][i % 2],
                 label=f"{w} executor JVM")
        mem.plot(ts, [s["memory"][w]["python_rss_mb"] for s in samples], linestyle="--",
                 color=["#1b7837", "#762a83"][i % 2], label=f"{w} Python workers")
    mem.set_ylabel("RSS (MB)")
    mem.legend(fontsize=7, frameon=False, ncol=2)
    for path in results["paths"]:
        colour, label = SOAK_STYLE.get(path, ("#333333", path))
        pts = [(s["t_s"] / 60, s["connections"][path]) for s in samples if s.get("connections")]
        conns.step([p[0] for p in pts], [p[1] for p in pts], where="post", color=colour, label=label)
    conns.set_ylabel("Postgres connections")
    conns.set_xlabel("minutes since start")
    conns.legend(fontsize=7, frameon=False)
    for ax in (lat, mem, conns):
        ax.grid(True, linewidth=0.4, alpha=0.6)
        for f in results.get("faults", []):
            ax.axvline(f["t_s"] / 60, color="#b2182b", linewidth=0.8, alpha=0.6)
    settings = results["settings"]
    lat.set_title(f"Soak: {settings['rate_rows_per_s']} rows/s for {settings['minutes']:g} min on a standalone "
                  f"cluster, a fault every {settings['fault_every_s']:g} s (red lines); lost "
                  f"{results['lost_total']}, duplicated {results['duplicated_total']}", fontsize=9)
    fig.tight_layout()
    return save(fig, out)


#: Every committed chart: JSON result → (renderer, PNG next to it).
CHARTS: dict[str, tuple[Callable[[Mapping[str, Any], Path], Path], str]] = {
    "rate_sweep.json": (render_rate_sweep, "rate_sweep.png"),
    "foreach_latency.json": (render_foreach_latency, "foreach_latency.png"),
    "sink_benchmark.json": (render_sink_benchmark, "sink_benchmark.png"),
    "soak.json": (render_soak, "soak.png"),
    "kafka_workload.json": (render_kafka_workload, "kafka_workload.png"),
}


def render(json_name: str, results_dir: Path = RESULTS, out_dir: Path | None = None) -> Path:
    """Redraw the chart of ``results_dir/json_name`` into ``out_dir`` (default: the same folder)."""
    renderer, png = CHARTS[json_name]
    data = json.loads((Path(results_dir) / json_name).read_text(encoding="utf-8"))
    return renderer(data, Path(out_dir or results_dir) / png)


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv else None) or [n for n in CHARTS if (RESULTS / n).exists()]
    for name in names:
        if name not in CHARTS:
            print(f"charts: no chart for {name!r}; known: {', '.join(CHARTS)}", file=sys.stderr)
            return 2
        print(f"wrote {render(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
