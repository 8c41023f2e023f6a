"""Trials of both arms: the folder layout, the paired statistic and the skill-read evidence.

Layout of a run folder (``eval run --out DIR``; ``eval grade DIR`` reads the same)::

    DIR/skill/<skill name>/                 the packaged skill (what ``skills.py package`` builds), read-only
    DIR/prompts/<arm>/<trial>/<task>.md     the prompt an assistant gets
    DIR/<arm>/<trial>/<task>/               its answer (plus NOTES.md: what it read)

Arms are ``with-skill`` and ``without-skill``. The statistic is McNemar's exact test on the pairs
``(task, trial)``: a pair is discordant when one arm passes and the other fails; under "the skill makes no
difference" each discordant pair goes either way with probability 1/2 (two-sided exact binomial).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

ARMS = ("with-skill", "without-skill")
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


def trial_folders(folder: Path) -> dict[str, list[Path]]:
    """``{arm: [DIR/arm/<trial>, ...]}`` sorted by trial name."""
    out = {}
    for arm in ARMS:
        base = folder / arm
        out[arm] = sorted((p for p in base.iterdir() if p.is_dir() and not p.name.startswith("_")),
                          key=lambda p: (len(p.name), p.name)) if base.is_dir() else []
    return out


def compare_trials(reports: dict[str, list[dict]], read: dict[str, dict[tuple[str, str], tuple[bool, str]]]) -> dict:
    """Per-task pass rates per arm, their difference, McNemar over (task, trial) pairs, skill-read counts."""
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
                         "with_skill_answers_that_never_read_the_skill": not_read})
    pairs = sorted(set(ow) & set(owo))
    b = sum(1 for k in pairs if ow[k] and not owo[k])
    c = sum(1 for k in pairs if owo[k] and not ow[k])
    total_w = sum(ow.values()) / len(ow) if ow else 0.0
    total_wo = sum(owo.values()) / len(owo) if owo else 0.0
    reads = read.get(ARMS[0], {})
    return {"arms": list(ARMS), "trials": {arm: [r["trial"] for r in reports[arm]] for arm in ARMS},
            "per_task": per_task,
            "overall": {"with_skill_rate": round(total_w, 3), "without_skill_rate": round(total_wo, 3),
                        "difference_points": round((total_w - total_wo) * 100, 1)},
            "paired_test": {"test": "McNemar exact (two-sided binomial on discordant (task, trial) pairs)",
                            "pairs": len(pairs), "with_skill_only": b, "without_skill_only": c,
                            "p_value": round(mcnemar_exact(b, c), 6)},
            "skill_read": {"answers": len(reads), "read": sum(ok for ok, _ in reads.values()),
                           "never_opened": sorted(f"{t}/{n}" for (n, t), (ok, _e) in reads.items() if not ok)}}


def _rate(x: dict) -> str:
    return "-" if x["rate"] is None else f"{x['passed']}/{x['trials']}"


def markdown_table(result: dict, skill_commit: str | None = None) -> str:
    o, p, s = result["overall"], result["paired_test"], result["skill_read"]
    lines = ["# Eval comparison: with the skill and without", ""]
    if skill_commit:
        lines += [f"Skill graded at commit `{skill_commit}`.", ""]
    lines += ["| task | category | with skill | without skill | difference | with-skill answers that never read the skill |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for t in result["per_task"]:
        d = "-" if t["difference"] is None else f"{t['difference'] * 100:+.0f} pts"
        lines.append(f"| {t['name']} | {t['category']} | {_rate(t['with_skill'])} | {_rate(t['without_skill'])} | {d} | "
                     f"{t['with_skill_answers_that_never_read_the_skill']} |")
    lines += ["", f"Overall pass rate: with the skill {o['with_skill_rate']:.0%}, without {o['without_skill_rate']:.0%} "
              f"({o['difference_points']:+.1f} points).",
              f"Paired test ({p['test']}): {p['pairs']} pairs, {p['with_skill_only']} passed only with the skill, "
              f"{p['without_skill_only']} only without; p = {p['p_value']:.4g}.",
              f"Skill read: {s['read']} of {s['answers']} with-skill answers show the skill was opened; "
              f"{len(s['never_opened'])} never opened it" + (f" ({', '.join(s['never_opened'][:20])})." if s["never_opened"] else ".")]
    return "\n".join(lines) + "\n"


def readme_table(result: dict) -> str:
    """The per-task table the README quotes, rendered from a committed ``comparison.json`` (a generated block)."""
    lines = ["| task | category | with skill | without skill | difference |", "| --- | --- | ---: | ---: | ---: |"]
    for t in result["per_task"]:
        d = "-" if t["difference"] is None else f"{t['difference'] * 100:+.0f} pts"
        lines.append(f"| {t['name']} | {t['category']} | {_rate(t['with_skill'])} | {_rate(t['without_skill'])} | {d} |")
    return "\n".join(lines)


def write_comparison(result: dict, out: Path, skill_commit: str | None = None) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "comparison.json", out / "comparison.md"
    data = dict(result, skill_commit=skill_commit)
    j.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    m.write_text(markdown_table(result, skill_commit), encoding="utf-8")
    return j, m
