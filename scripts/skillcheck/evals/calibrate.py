"""The margins of the measuring graders: each task's reference and known-wrong answers graded, with what the
grader measured (``skills.py eval calibrate --out FILE``).

A measuring grader (throughput against ``COPY``, sink-visible p99) has a bound; this records, on the machine and
load of the day, how far the reference answer stays inside it and how far the wrong ones fall outside, so a bound
is chosen from recorded figures. The load average is recorded before and after (the machines are shared).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path

from .grade import ROOT, Context, grade_task, prefetch_spark, spark_jobs

MEASURING = ("prod-throughput-floor", "prod-rtm-latency-p99")


def calibrate(tasks: dict, names: list[str], log=lambda _m: None) -> dict:
    answers = ROOT / "evals" / "answers"
    by_name = {t["name"]: t for t in tasks["evals"]}
    out: dict = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%MZ"), "machine": platform.machine(),
                 "cpus": os.cpu_count(), "load_average_before": list(os.getloadavg()), "tasks": {}}
    ctx = Context(log=log)
    try:
        folders = {n: [("reference", answers / "reference" / n),
                       *((f"unusual/{p.name}", p) for p in sorted((answers / "unusual" / n).glob("*"))),
                       *((f"wrong/{p.name}", p) for p in sorted((answers / "wrong" / n).glob("*")))] for n in names}
        prefetch_spark(ctx, [j for n in names for _, f in folders[n] for j in spark_jobs(by_name[n], f)])
        for n in names:
            out["tasks"][n] = {}
            for label, folder in folders[n]:
                r = grade_task(by_name[n], folder, ctx)
                last = r["checks"][-1]
                out["tasks"][n][label] = {"passed": r["passed"], "check": last["check"], "measured": last["evidence"]}
                log(f"{n} {label}: {'pass' if r['passed'] else 'FAIL'} {last['evidence'][:120]}")
    finally:
        ctx.close()
    out["load_average_after"] = list(os.getloadavg())
    return out


def write(tasks: dict, names: list[str], path: Path, log=lambda _m: None) -> dict:
    data = calibrate(tasks, names, log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return data
