"""Trials of both arms: the folder layout, the paired statistic and the skill-read evidence.

Layout of a run folder (``eval run --out DIR``; ``eval grade DIR`` reads the same)::

    DIR/skill/<skill name>/                             the packaged skill (``skills.py package``), read-only
    DIR/prompts/<condition>/<arm>/<trial>/<task>.md     the prompt an assistant gets
    DIR/<condition>/<arm>/<trial>/<task>/               its answer (plus NOTES.md: what it read)
    DIR/_effort/<condition>/<arm>/<trial>/<task>.json   its effort (wall time, tool calls, turns, tokens)

Conditions are what the assistant has (:data:`CONDITIONS`): ``local`` (a local PySpark and Postgres) and
``search-only`` (search and a plain Python). A folder with ``DIR/<arm>/`` directly (the 2026-11-25 run) is one
condition, ``local``. Arms are ``with-skill`` and ``without-skill``. The statistic is McNemar's exact test on the pairs
``(task, trial)``: a pair is discordant when one arm passes and the other fails; under "the skill makes no
difference" each discordant pair goes either way with probability 1/2 (two-sided exact binomial).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

ARMS = ("with-skill", "without-skill")
#: What the assistant has in each condition; the prompt states it, ``eval run --agent`` enforces what it can.
CONDITIONS = {
    "local": ("You can run code here: a Python with pyspark 4.3.0, psycopg 3 and pytest, Java 17, and Postgres "
              "binaries (initdb, pg_ctl) are installed, so you may try your answer on a local Spark and Postgres."),
    "search-only": ("You have web search and a plain Python 3 (standard library only) and nothing else: no PySpark, "
                    "no Java, no Postgres, so you cannot run Spark or a database here, as on a typical Databricks "
                    "user's laptop. Your code is graded later on real Spark and Postgres."),
}
LEGACY_CONDITION = "local"
#: A task both arms pass in every trial measures nothing the skill adds: it only keeps the skill from regressing.
GUARD, EVIDENCE = "regression guard", "evidence"
NOTES_NAMES = ("NOTES.md", "notes.md", "transcript.md", "transcript.txt", "transcript.jsonl")
# What counts as having read the skill: a notes/transcript file, or the answer itself, names one of its files.
SKILL_CITE = re.compile(r"SKILL\.md|references/[\w.-]+\.md|spark-rtm-lakebase|rtm_lakebase[/.]\w+", re.I)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact p-value for ``b`` pairs won by one arm and ``c`` by the other (ties dropped)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def skill_read(answer_dir: Path) -> tuple[bool, str]:
    """(read, evidence): whether the answer folder shows the skill was opened, and where."""
    if not answer_dir.is_dir():
        return False, "no answer folder"
    files = sorted(p for p in answer_dir.iterdir() if p.is_file())
    ordered = [p for p in files if p.name in NOTES_NAMES] + [p for p in files if p.name not in NOTES_NAMES]
    for p in ordered[:30]:
        try:
            text = p.read_text(encoding="utf-8", errors="replace")[:2_000_000]
        except OSError:
            continue
        m = SKILL_CITE.search(text)
        if m:
            return True, f"{p.name} cites {m.group(0)}"
    return False, "no notes or answer file cites a skill file"


def is_trial_layout(folder: Path) -> bool:
    return any((folder / arm).is_dir() for arm in ARMS)


def condition_folders(folder: Path) -> dict[str | None, Path]:
    """``{condition: folder holding <arm>/<trial>/}``; ``{None: folder}`` for a run folder without conditions."""
    if is_trial_layout(folder):
        return {None: folder}
    return {c: folder / c for c in CONDITIONS if is_trial_layout(folder / c)}


def trial_folders(folder: Path) -> dict[str, list[Path]]:
    """``{arm: [DIR/arm/<trial>, ...]}`` sorted by trial name."""
    out = {}
    for arm in ARMS:
        base = folder / arm
        out[arm] = sorted((p for p in base.iterdir() if p.is_dir() and not p.name.startswith("_")),
                          key=lambda p: (len(p.name), p.name)) if base.is_dir() else []
    return out


def evidence_label(with_skill: dict, without_skill: dict) -> str:
    """``regression guard`` when both arms pass every trial, else ``evidence``."""
    full = all(x["trials"] and x["passed"] == x["trials"] for x in (with_skill, without_skill))
    return GUARD if full else EVIDENCE


def paired(ow: dict, owo: dict, names: set[str] | None = None) -> dict:
    """Rates and McNemar's exact test over the (task, trial) pairs of ``names`` (all tasks when None)."""
    ow = {k: v for k, v in ow.items() if names is None or k[0] in names}
    owo = {k: v for k, v in owo.items() if names is None or k[0] in names}
    pairs = sorted(set(ow) & set(owo))
    b = sum(1 for k in pairs if ow[k] and not owo[k])
    c = sum(1 for k in pairs if owo[k] and not ow[k])
    return {"tasks": len({k[0] for k in set(ow) | set(owo)}),
            "with_skill": {"passed": sum(ow.values()), "answers": len(ow)},
            "without_skill": {"passed": sum(owo.values()), "answers": len(owo)},
            "paired_test": {"test": "McNemar exact (two-sided binomial on discordant (task, trial) pairs)",
                            "pairs": len(pairs), "with_skill_only": b, "without_skill_only": c,
                            "p_value": round(mcnemar_exact(b, c), 6)}}


def compare_trials(reports: dict[str, list[dict]], read: dict[str, dict[tuple[str, str], tuple[bool, str]]],
                   effort: dict[str, dict[tuple[str, str], dict]] | None = None) -> dict:
    """Per-task pass rates per arm, their difference and evidence label, McNemar over (task, trial) pairs (all
    tasks, and the evidence tasks alone), skill-read counts, and effort per arm."""
    w_reports, wo_reports = reports[ARMS[0]], reports[ARMS[1]]
    names = [t["name"] for t in (w_reports or wo_reports)[0]["tasks"]] if (w_reports or wo_reports) else []
    cats = {t["name"]: t["category"] for r in w_reports + wo_reports for t in r["tasks"]}

    def outcomes(rs):
        return {(t["name"], r["trial"]): t["passed"] for r in rs for t in r["tasks"]}

    ow, owo = outcomes(w_reports), outcomes(wo_reports)
    per_task = []
    for name in names:
        pw = [v for (n, _), v in ow.items() if n == name]
        pwo = [v for (n, _), v in owo.items() if n == name]
        rw = sum(pw) / len(pw) if pw else None
        rwo = sum(pwo) / len(pwo) if pwo else None
        not_read = sum(1 for (n, _), (ok, _e) in read.get(ARMS[0], {}).items() if n == name and not ok)
        per_task.append({"name": name, "category": cats.get(name, ""), "with_skill": {"passed": sum(pw), "trials": len(pw), "rate": rw},
                         "without_skill": {"passed": sum(pwo), "trials": len(pwo), "rate": rwo},
                         "difference": None if rw is None or rwo is None else round(rw - rwo, 3),
                         "evidence": evidence_label({"passed": sum(pw), "trials": len(pw)},
                                                    {"passed": sum(pwo), "trials": len(pwo)}),
                         "with_skill_answers_that_never_read_the_skill": not_read})
    pairs = sorted(set(ow) & set(owo))
    b = sum(1 for k in pairs if ow[k] and not owo[k])
    c = sum(1 for k in pairs if owo[k] and not ow[k])
    total_w = sum(ow.values()) / len(ow) if ow else 0.0
    total_wo = sum(owo.values()) / len(owo) if owo else 0.0
    reads = read.get(ARMS[0], {})
    evidence_names = {t["name"] for t in per_task if t["evidence"] == EVIDENCE}
    from .effort import summarise

    effort = effort or {}
    return {"arms": list(ARMS), "trials": {arm: [r["trial"] for r in reports[arm]] for arm in ARMS},
            "per_task": per_task,
            "overall": {"with_skill_rate": round(total_w, 3), "without_skill_rate": round(total_wo, 3),
                        "difference_points": round((total_w - total_wo) * 100, 1)},
            "paired_test": {"test": "McNemar exact (two-sided binomial on discordant (task, trial) pairs)",
                            "pairs": len(pairs), "with_skill_only": b, "without_skill_only": c,
                            "p_value": round(mcnemar_exact(b, c), 6)},
            "evidence_tasks": dict(paired(ow, owo, evidence_names), names=sorted(evidence_names)),
            "regression_guards": sorted(t["name"] for t in per_task if t["evidence"] == GUARD),
            "effort": {arm: summarise([v for (n, _t), v in effort.get(arm, {}).items() if n in names]) for arm in ARMS},
            "skill_read": {"answers": len(reads), "read": sum(ok for ok, _ in reads.values()),
                           "never_opened": sorted(f"{t}/{n}" for (n, t), (ok, _e) in reads.items() if not ok)}}


def _rate(x: dict) -> str:
    return "-" if x["rate"] is None else f"{x['passed']}/{x['trials']}"


def _median(summary: dict, key: str) -> str:
    x = summary.get(key) or {}
    return "-" if x.get("median") is None else f"{x['median']:g} ({x['jobs']} jobs)"


def markdown_section(result: dict, title: str | None = None) -> list[str]:
    o, p, s, e = result["overall"], result["paired_test"], result["skill_read"], result["evidence_tasks"]
    lines = [f"## {title}", ""] if title else []
    lines += ["| task | category | with skill | without skill | difference | evidence | with-skill answers that never read the skill |",
              "| --- | --- | ---: | ---: | ---: | --- | ---: |"]
    for t in result["per_task"]:
        d = "-" if t["difference"] is None else f"{t['difference'] * 100:+.0f} pts"
        lines.append(f"| {t['name']} | {t['category']} | {_rate(t['with_skill'])} | {_rate(t['without_skill'])} | {d} | "
                     f"{t['evidence']} | {t['with_skill_answers_that_never_read_the_skill']} |")
    ep = e["paired_test"]
    lines += ["", f"Evidence tasks ({e['tasks']}; a task both arms pass in every trial is a regression guard, not "
              f"evidence): with the skill {e['with_skill']['passed']}/{e['with_skill']['answers']}, without "
              f"{e['without_skill']['passed']}/{e['without_skill']['answers']}; McNemar p = {ep['p_value']:.4g} "
              f"({ep['with_skill_only']} pairs passed only with the skill, {ep['without_skill_only']} only without).",
              f"Regression guards: {len(result['regression_guards'])}.",
              f"All tasks: with the skill {o['with_skill_rate']:.0%}, without {o['without_skill_rate']:.0%} "
              f"({o['difference_points']:+.1f} points).",
              f"Paired test ({p['test']}): {p['pairs']} pairs, {p['with_skill_only']} passed only with the skill, "
              f"{p['without_skill_only']} only without; p = {p['p_value']:.4g}.",
              f"Skill read: {s['read']} of {s['answers']} with-skill answers show the skill was opened; "
              f"{len(s['never_opened'])} never opened it" + (f" ({', '.join(s['never_opened'][:20])})." if s["never_opened"] else "."),
              "", "| effort (median per job) | with skill | without skill |", "| --- | ---: | ---: |"]
    eff = result.get("effort") or {}
    for key, label in (("wall_seconds", "wall time (s)"), ("tool_calls", "tool calls"), ("turns", "turns"),
                       ("input_tokens", "input tokens"), ("output_tokens", "output tokens")):
        lines.append(f"| {label} | {_median(eff.get(ARMS[0], {}), key)} | {_median(eff.get(ARMS[1], {}), key)} |")
    return lines


def markdown_table(results: dict, skill_commit: str | None = None) -> str:
    """``results``: one comparison, or ``{"conditions": {name: comparison}}``."""
    lines = ["# Eval comparison: with the skill and without", ""]
    if skill_commit:
        lines += [f"Skill graded at commit `{skill_commit}`.", ""]
    if "conditions" in results:
        for name, result in results["conditions"].items():
            lines += [*markdown_section(result, f"Condition `{name}`: {CONDITIONS.get(name, '')}"), ""]
    else:
        lines += markdown_section(results)
    return "\n".join(lines).rstrip("\n") + "\n"


def write_comparison(result: dict, out: Path, skill_commit: str | None = None) -> tuple[Path, Path]:
    """``result``: ``{"conditions": {name: comparison}}`` (or one comparison)."""
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "comparison.json", out / "comparison.md"
    data = dict(result, skill_commit=skill_commit)
    j.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    m.write_text(markdown_table(result, skill_commit), encoding="utf-8")
    return j, m
