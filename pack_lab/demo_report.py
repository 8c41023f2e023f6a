"""The demo's results: one :class:`PathResult` per path, the side-by-side table, the JSON report, the chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pack_lab.demo_options import DemoOptions
from pack_lab.text_table import aligned

REPORT_NAME = "demo-report.json"
CHART_NAME = "demo-latency.png"


@dataclass
class PathResult:
    path: str
    title: str
    rows_sent: int = 0
    duplicates_sent: int = 0
    distinct_sent: int = 0
    rows_in_table: int = 0
    missing: int = 0
    unexpected: int = 0
    duplicated: int = 0
    seconds: float = 0.0
    latency: dict[str, float] = field(default_factory=dict)
    engine: dict[str, float] = field(default_factory=dict)
    clock: str = ""
    skipped: str | None = None
    error: str | None = None

    @property
    def ran(self) -> bool:
        return self.skipped is None

    @property
    def ok(self) -> bool:
        return (self.skipped is None and self.error is None and self.missing == 0
                and self.unexpected == 0 and self.duplicated == 0
                and self.rows_in_table == self.distinct_sent)


def format_table(results: list[PathResult]) -> str:
    """The side-by-side table (fixed width)."""
    header = ["path", "sent", "distinct", "in table", "missing", "dup'd",
              "p50 ms", "p95 ms", "p99 ms", "max ms", "engine p50", "result"]
    rows = [header]
    for res in results:
        if not res.ran or res.error:
            rows.append([res.title, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-",
                         "skipped" if not res.ran else "FAILED"])
            continue
        lat, eng = res.latency, res.engine

        def ms(values: dict[str, float], key: str) -> str:
            return f"{values[key]:.0f}" if key in values else "-"

        rows.append([res.title, str(res.rows_sent), str(res.distinct_sent), str(res.rows_in_table),
                     str(res.missing), str(res.duplicated), ms(lat, "p50"), ms(lat, "p95"),
                     ms(lat, "p99"), ms(lat, "max"), ms(eng, "p50"), "OK" if res.ok else "MISMATCH"])
    return aligned(rows)


def format_notes(results: list[PathResult]) -> list[str]:
    notes = []
    clocks = {res.clock for res in results if res.clock}
    if clocks:
        notes.append("latency: sent → visible in Postgres, by the server's " + " / ".join(sorted(clocks))
                     + "; engine: sent → the per-row JVM clock inside the query")
    for res in results:
        if res.skipped:
            notes.append(f"{res.title}: skipped — {res.skipped}")
        if res.error:
            notes.append(f"{res.title}: FAILED — {res.error}")
    return notes


def overall_ok(results: list[PathResult]) -> bool:
    ran = [res for res in results if res.ran]
    return bool(ran) and all(res.ok for res in ran)


def write_report(results: list[PathResult], options: DemoOptions, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "demo": "rtm-lakebase-paths",
        "options": {k: v for k, v in asdict(options).items() if k != "output_dir"},
        "ok": overall_ok(results),
        "paths": [dict(asdict(res), ok=res.ok) for res in results],
    }
    path = out_dir / REPORT_NAME
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


def write_chart(report_path: Path, out_dir: Path) -> tuple[Path | None, str | None]:
    """Render the latency chart from the JSON report; ``(None, why)`` when it cannot."""
    try:
        from pack_lab.charts import render_demo_chart
    except ImportError as exc:
        return None, f"no chart: {exc} (install the dev dependencies: bash scripts/setup.sh)"
    chart = out_dir / CHART_NAME
    try:
        render_demo_chart(json.loads(report_path.read_text(encoding="utf-8")), chart)
    except Exception as exc:  # a chart is a convenience: never lose the run over it
        return None, f"no chart: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__}"
    return chart, None
