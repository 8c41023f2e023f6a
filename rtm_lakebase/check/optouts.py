"""Opt-outs: ``# skills: allow CODE[,CODE] -- reason`` in Python, ``<!-- skills: allow CODE -- reason -->`` in Markdown.

The reason is required (OPT001), the codes must exist and be suppressible
(OPT003), and an opt-out that suppresses nothing is reported (OPT002). In
Python the comment sits on the finding's line or the line above; in Markdown
it is the HTML comment on the line right before a fence or a paragraph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rtm_lakebase.check.codes import CODES
from rtm_lakebase.check.findings import Finding

OPTOUT_RE = re.compile(r"^skills:\s*allow\b\s*(?P<codes>[A-Za-z0-9_,\s]*?)\s*(?:--\s*(?P<reason>.*?))?\s*$")
PY_OPTOUT_RE = re.compile(r"#\s*skills:\s*allow\s+(?P<codes>[A-Z0-9_,\s]+?)\s*(?:--\s*(?P<reason>.*))?$")


def suppressible(code: str) -> bool:
    return code in CODES and CODES[code].suppressible


@dataclass
class OptOut:
    line: int
    codes: list[str]
    reason: str
    used: set[str] = field(default_factory=set)


def parse_optouts(comments: list[tuple[int, str]], path: str) -> tuple[list[OptOut], list[Finding]]:
    optouts, findings = [], []
    for line, body in comments:
        m = OPTOUT_RE.match(body)
        if not m:
            continue
        codes = [c for c in re.split(r"[\s,]+", m.group("codes").strip()) if c]
        reason = (m.group("reason") or "").strip()
        if not reason:
            findings.append(Finding(path, line, 1, "OPT001", "opt-out needs a reason: <!-- skills: allow CODE -- reason -->"))
        if not codes:
            findings.append(Finding(path, line, 1, "OPT003", "opt-out lists no code"))
        good = []
        for c in codes:
            if not suppressible(c):
                findings.append(Finding(path, line, 1, "OPT003", f"cannot opt out of {c!r}: unknown or not suppressible"))
            else:
                good.append(c)
        optouts.append(OptOut(line, good, reason))
    return optouts, findings


def apply_optouts(findings: list[Finding], optouts: list[OptOut]) -> list[Finding]:
    kept = []
    for f in findings:
        hit = next((o for o in optouts if f.code in o.codes), None)
        if hit is not None and suppressible(f.code):
            hit.used.add(f.code)
        else:
            kept.append(f)
    return kept


def stale(optouts: list[OptOut], path: str) -> list[Finding]:
    return [Finding(path, o.line, 1, "OPT002", f"opt-out for {c} suppresses nothing; remove it")
            for o in optouts for c in o.codes if c not in o.used]


def module_optouts(source: str, path: str, findings: list[Finding]) -> list[Finding]:
    """``findings`` of a Python module minus those its ``# skills: allow`` comments suppress, plus OPT findings."""
    optouts: dict[int, OptOut] = {}
    out: list[Finding] = []
    for i, text in enumerate(source.splitlines(), 1):
        m = PY_OPTOUT_RE.search(text)
        if m:
            body = "skills: allow " + m.group("codes") + (" -- " + m.group("reason") if m.group("reason") else "")
            opts, found = parse_optouts([(i, body)], path)
            out += found
            optouts[i] = opts[0]
    for f in findings:
        cands = [optouts[line] for line in (f.line, f.line - 1) if line in optouts]
        out += apply_optouts([f], cands)
    out += stale(list(optouts.values()), path)
    return out
