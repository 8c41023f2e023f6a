"""What a recorded run is evidence of, computed from its committed per-trial reports (never typed by hand).

``skills.py eval evidence RUN`` reads ``RUN/_report/[<condition>/]<arm>/<trial>/report.json``, labels each task
(``regression guard`` when both arms pass every trial, else ``evidence``), computes the pass counts and McNemar's
exact test over the evidence tasks' (task, trial) pairs per condition, and writes ``RUN/_report/evidence.json``.
:func:`markdown_block` renders that file into the README (generated block ``eval-evidence``); it is pure (same
JSON, same Markdown) and needs nothing but the standard library, as the block generator loads it by path.
"""

from __future__ import annotations

import json
from pathlib import Path

CONDITIONS = ("local", "search-only")
ARMS = ("with-skill", "without-skill")


def _reports(base: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for arm in ARMS:
        out[arm] = []
        for f in sorted((base / arm).glob("*/report.json"), key=lambda p: (len(p.parent.name), p.parent.name)):
            data = json.loads(f.read_text(encoding="utf-8"))
            data["trial"] = f.parent.name
            out[arm].append(data)
    return out


def compute(run: Path) -> dict:
    """``{"run": ..., "conditions": {condition: summary}}`` from the per-trial reports under ``run/_report``."""
    from skillcheck.evals.effort import read_effort, summarise
    from skillcheck.evals.trials import compare_trials

    report = run / "_report"
    bases = {c: report / c for c in CONDITIONS if (report / c).is_dir()} or {"local": report}
    legacy = not any((report / c).is_dir() for c in CONDITIONS)
    out: dict = {"run": run.as_posix(), "conditions": {}}
    for condition, base in bases.items():
        reports = _reports(base)
        if not any(reports.values()):
            continue
        r = compare_trials(reports, {})
        out["conditions"][condition] = {
            "trials": {arm: len(reports[arm]) for arm in ARMS},
            "tasks": [{"name": t["name"], "category": t["category"], "with_skill": t["with_skill"]["passed"],
                       "without_skill": t["without_skill"]["passed"], "trials": t["with_skill"]["trials"],
                       "evidence": t["evidence"]} for t in r["per_task"]],
            "all": {"with_skill": [sum(t["with_skill"]["passed"] for t in r["per_task"]),
                                   sum(t["with_skill"]["trials"] for t in r["per_task"])],
                    "without_skill": [sum(t["without_skill"]["passed"] for t in r["per_task"]),
                                      sum(t["without_skill"]["trials"] for t in r["per_task"])],
                    "paired_test": r["paired_test"]},
            "evidence_tasks": r["evidence_tasks"], "regression_guards": r["regression_guards"]}
        records = {arm: list(read_effort(run, None if legacy else condition, arm).values()) for arm in ARMS}
        if any(records.values()):  # effort per answer, as the sessions or the client recorded it
            out["conditions"][condition]["effort"] = {
                "clients": sorted({str(rec.get("client")) for recs in records.values() for rec in recs}),
                **{arm: summarise(recs) for arm, recs in records.items()}}
    return out


def write(run: Path) -> Path:
    path = run / "_report" / "evidence.json"
    path.write_text(json.dumps(compute(run), indent=2) + "\n", encoding="utf-8")
    return path


def _effort_lines(effort: dict | None) -> list[str]:
    """One line on effort per answer (medians), when the run recorded it."""
    if not effort:
        return []

    def median(arm: str, key: str) -> str:
        m = effort.get(arm, {}).get(key, {}).get("median")
        return "n/a" if m is None else f"{m:g}"

    jobs = {arm: effort.get(arm, {}).get("jobs", 0) for arm in ARMS}
    return [f"- **Effort per answer** (medians; recorded by: {', '.join(effort.get('clients', []))}): with the skill "
            f"{median('with-skill', 'wall_seconds')} s and {median('with-skill', 'tool_calls')} tool calls "
            f"({jobs['with-skill']} answers), without it {median('without-skill', 'wall_seconds')} s and "
            f"{median('without-skill', 'tool_calls')} tool calls ({jobs['without-skill']} answers)."]


def markdown_block(data: dict) -> str:
    """The README's account of a recorded run: headline on the evidence tasks only, then every task."""
    lines: list[str] = []
    for condition, c in data["conditions"].items():
        e, p = c["evidence_tasks"], c["evidence_tasks"]["paired_test"]
        n_tasks = len(c["tasks"])
        lines += [f"Condition `{condition}` ({c['trials']['with-skill']} trials per arm):", "",
                  f"- **Evidence tasks:** {e['tasks']} of {n_tasks} tasks. On them, with the skill "
                  f"{e['with_skill']['passed']} of {e['with_skill']['answers']} answers pass, without it "
                  f"{e['without_skill']['passed']} of {e['without_skill']['answers']}.",
                  f"- **Paired test on the evidence tasks:** McNemar's exact test, {p['with_skill_only']} (task, trial) "
                  f"pairs passed only with the skill and {p['without_skill_only']} only without: "
                  f"p = {p['p_value']:.3g}.",
                  f"- **Regression guards:** {len(c['regression_guards'])} tasks both arms pass in every trial. "
                  "They keep the skill from regressing but are no evidence that it helps, and the headline leaves "
                  "them out.",
                  f"- **All tasks together:** with the skill {c['all']['with_skill'][0]} of {c['all']['with_skill'][1]}, "
                  f"without {c['all']['without_skill'][0]} of {c['all']['without_skill'][1]}."]
        lines += _effort_lines(c.get("effort"))
        lines += ["",
                  "| task | category | with skill | without skill | evidence |", "| --- | --- | ---: | ---: | --- |"]
        for t in c["tasks"]:
            lines.append(f"| {t['name']} | {t['category']} | {t['with_skill']}/{t['trials']} | "
                         f"{t['without_skill']}/{t['trials']} | {t['evidence']} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
