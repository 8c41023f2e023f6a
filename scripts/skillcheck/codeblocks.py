"""Fenced code blocks and example modules: parse, run the pattern rules, apply opt-outs, check excerpts.

Opt-out: an HTML comment on the line right before a fence (or a prose
paragraph), ``<!-- skills: allow CODE[,CODE] -- reason -->``. The reason is
required, the codes are suppressed for that block only, syntax errors are
never suppressed, and an opt-out that suppresses nothing is reported.
In example modules the same form is a comment on the finding's line or the
line above: ``# skills: allow CODE -- reason``.

Excerpt: ``<!-- excerpt: examples/MODULE.py#NAME -->`` right before a fence;
the block must equal the module's ``# --8<-- [start:NAME]`` ...
``# --8<-- [end:NAME]`` region, dedented, marker lines excluded.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from collections.abc import Callable

from .codes import CODES
from .findings import Finding
from .excerpts import EXCERPT_RE, region
from .markdown import Block, Document
from .rules import python_rules, text_rules
from .rules.prose import check_text

PYTHON_LANGS = {"python", "py", "python3"}
OPTOUT_RE = re.compile(r"^skills:\s*allow\b\s*(?P<codes>[A-Za-z0-9_,\s]*?)\s*(?:--\s*(?P<reason>.*?))?\s*$")
PY_OPTOUT_RE = re.compile(r"#\s*skills:\s*allow\s+(?P<codes>[A-Z0-9_,\s]+?)\s*(?:--\s*(?P<reason>.*))?$")


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
            if c not in CODES or not CODES[c].suppressible:
                findings.append(Finding(path, line, 1, "OPT003", f"cannot opt out of {c!r}: unknown or not suppressible"))
            else:
                good.append(c)
        optouts.append(OptOut(line, good, reason))
    return optouts, findings


def apply_optouts(findings: list[Finding], optouts: list[OptOut]) -> list[Finding]:
    kept = []
    for f in findings:
        hit = next((o for o in optouts if f.code in o.codes), None)
        if hit is not None and CODES[f.code].suppressible:
            hit.used.add(f.code)
        else:
            kept.append(f)
    return kept


def stale(optouts: list[OptOut], path: str) -> list[Finding]:
    return [Finding(path, o.line, 1, "OPT002", f"opt-out for {c} suppresses nothing; remove it")
            for o in optouts for c in o.codes if c not in o.used]


def check_python_source(source: str, path: str, line_offset: int = 0, col_offset: int = 0) -> tuple[list[Finding], ast.Module | None]:
    """Continuation, syntax and pattern rules on Python source; lines shifted by the offsets."""
    out = text_rules(source, path)
    tree = None
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        out.append(Finding(path, exc.lineno or 1, exc.offset or 1, "PY001", f"does not parse: {exc.msg}"))
    except ValueError as exc:  # e.g. null bytes
        out.append(Finding(path, 1, 1, "PY001", f"does not parse: {exc}"))
    except (RecursionError, MemoryError) as exc:
        out.append(Finding(path, 1, 1, "PY002", f"too deeply nested for the Python parser ({type(exc).__name__})"))
    if tree is not None:
        try:
            out += python_rules(tree, path)
        except (RecursionError, MemoryError) as exc:
            out.append(Finding(path, 1, 1, "PY002", f"too deeply nested to check the rules ({type(exc).__name__})"))
            tree = None
    shifted = [Finding(f.path, f.line + line_offset, f.col + col_offset, f.code, f.message) for f in set(out)]
    return shifted, tree


def _prose_segments(lines: list[tuple[int, str]]) -> list[tuple[int, int, str]]:
    return [(ln, 0, text) for ln, text in lines]


def check_excerpt(block: Block, path: str, line: int, target: str, name: str,
                  read_module: Callable[[str], str | None]) -> list[Finding]:
    source = read_module(target)
    if source is None:
        return [Finding(path, line, 1, "EXC001", f"excerpt module {target} not found")]
    expected, problem = region(source, name)
    if expected is None:
        return [Finding(path, line, 1, "EXC002", f"region {name!r} in {target} {problem}")]
    actual = [l.rstrip() for l in block.lines]
    if actual != expected:
        for k in range(max(len(actual), len(expected))):
            a = actual[k] if k < len(actual) else "<end of block>"
            e = expected[k] if k < len(expected) else "<end of region>"
            if a != e:
                return [Finding(path, block.content_start + k, 1, "EXC003",
                                f"block differs from {target}#{name} at block line {k + 1}: expected {e!r}, "
                                f"found {a!r}; run `python scripts/skills.py generate`")]
    return []


def check_document(doc: Document, read_module: Callable[[str], str | None]) -> list[Finding]:
    """All code-block, excerpt, opt-out and prose findings of one Markdown document."""
    path = doc.path
    out: list[Finding] = []
    for block in doc.blocks:
        optouts, found = parse_optouts(block.comments, path)
        out += found
        block_findings: list[Finding] = []
        if not block.lang:
            out.append(Finding(path, block.start, block.indent + 1, "FENCE001", "fenced block has no language tag"))
        if not block.closed:
            out.append(Finding(path, block.start, block.indent + 1, "FENCE002",
                               f"fence opened here is never closed (runs to line {block.end})"))
        if block.lang in PYTHON_LANGS:
            res, _ = check_python_source(block.source, path, block.start, block.indent)
            block_findings += res
        else:
            for ln, text in enumerate(block.lines, block.content_start):
                block_findings += check_text([(ln, block.indent, text)], path)
        excerpt_comments = [(ln, EXCERPT_RE.match(body)) for ln, body in block.comments]
        for ln, m in excerpt_comments:
            if m:
                out += check_excerpt(block, path, ln, m.group("path"), m.group("name"), read_module)
        out += apply_optouts(block_findings, optouts)
        out += stale(optouts, path)
    # Excerpt comments not directly above a fence.
    fence_comment_lines = {ln for b in doc.blocks for ln, _ in b.comments}
    for line, body in doc.comments:
        if body.startswith("excerpt:") and line not in fence_comment_lines:
            out.append(Finding(path, line, 1, "EXC004", "excerpt comment is not directly followed by a fenced block"))
    for line in doc.unclosed_comments:
        out.append(Finding(path, line, 1, "HTML001", "HTML comment opened here is never closed with '-->'"))
    for para in doc.paragraphs:
        optouts, found = parse_optouts(para.comments, path)
        out += found
        out += apply_optouts(check_text(_prose_segments(para.lines), path), optouts)
        out += stale(optouts, path)
    return out


def check_module(path: str, source: str) -> tuple[list[Finding], ast.Module | None]:
    """Rules for an example module, with ``# skills: allow CODE -- reason`` on the line or the line above."""
    findings, tree = check_python_source(source, path)
    lines = source.splitlines()
    optouts: dict[int, OptOut] = {}
    out: list[Finding] = []
    for i, text in enumerate(lines, 1):
        m = PY_OPTOUT_RE.search(text)
        if m:
            opts, found = parse_optouts([(i, "skills: allow " + m.group("codes") + (" -- " + m.group("reason") if m.group("reason") else ""))], path)
            out += found
            optouts[i] = opts[0]
    for f in findings:
        cands = [optouts[l] for l in (f.line, f.line - 1) if l in optouts]
        kept = apply_optouts([f], cands)
        out += kept
    out += stale(list(optouts.values()), path)
    if tree is not None and not ast.get_docstring(tree) and source.strip():
        out.append(Finding(path, 1, 1, "EX001", "module has no docstring"))
    return out, tree
