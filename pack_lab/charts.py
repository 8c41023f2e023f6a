"""Reproducible PNG drawing shared by the lab's demo and the benchmarks (``benchmarks/charts.py``).

Byte-for-byte reproducible output: the Agg renderer, the DejaVu Sans font that ships with matplotlib,
fixed size and resolution, and no timestamp or software tag in the PNG metadata.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Colours and labels per sink path (rate sweep and demo share them).
PATH_STYLE = {
    "rtm-jvm": ("#1b7837", "real-time mode + JVM sink"),
    "rtm-python": ("#c51b7d", "real-time mode + Python foreach"),
    "rtm-fast-foreach": ("#e08214", "real-time mode + fast Python foreach"),
    "microbatch": ("#2166ac", "micro-batch (0 s) + Python foreach"),
}


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    matplotlib.rcdefaults()
    matplotlib.rcParams.update({
        "font.family": "DejaVu Sans",
        "font.size": 9,
        "axes.titlesize": 10,
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "path.simplify": False,
    })
    return plt


def save(fig, out: Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=100, metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return out


def log_axis_ms(ax, axis: str = "y") -> None:
    from matplotlib.ticker import FuncFormatter

    formatter = FuncFormatter(lambda v, _pos: f"{v:g}")
    if axis == "y":
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(formatter)
    else:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(formatter)



def render_demo_chart(report: Mapping[str, Any], out: Path) -> Path:
    """The demo's paths side by side: sink-visible p50/p95/p99 and engine p50 (ms, log)."""
    plt = pyplot()
    paths = [p for p in report.get("paths", []) if p.get("latency")]
    fig, ax = plt.subplots(figsize=(8, 4))
    quantiles = (("p50", 0.8), ("p95", 0.55), ("p99", 0.35))
    width = 0.2
    for i, path in enumerate(paths):
        colour, label = PATH_STYLE.get(path["path"], ("#777777", path["path"]))
        for j, (q, alpha) in enumerate(quantiles):
            value = max(path["latency"].get(q, 0), 1)
            ax.bar(i + (j - 1) * width, value, width=width, color=colour, alpha=alpha)
            ax.annotate(f"{path['latency'].get(q, 0):.0f}", xy=(i + (j - 1) * width, value),
                        xytext=(0, 2), textcoords="offset points", ha="center", fontsize=7)
        engine = path.get("engine", {}).get("p50")
        if engine is not None:
            ax.plot([i - 1.5 * width, i + 1.5 * width], [max(engine, 1)] * 2, color="black",
                    linewidth=1.2, linestyle=":")
    ax.set_xticks(range(len(paths)),
                  [PATH_STYLE.get(p["path"], (None, p["path"]))[1].replace(" + ", "\n+ ") for p in paths])
    log_axis_ms(ax, "y")
    ax.set_ylabel("sent → visible in Postgres (ms, log scale)")
    ax.set_title("Same workload, three ways: bars p50 / p95 / p99, dotted line engine p50")
    ax.grid(True, axis="y", linewidth=0.4, alpha=0.6)
    fig.tight_layout()
    return save(fig, out)
