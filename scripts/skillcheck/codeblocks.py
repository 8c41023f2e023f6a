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
from collections.abc import Callable

# The rules, their opt-outs and the per-block/per-paragraph checks are the checker that ships with the skill
# (rtm_lakebase.check); the validator adds the pack's own checks (fences, excerpts, comments, docstrings).
from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.markdown import check_block, check_paragraph
from rtm_lakebase.check.optouts import (
    OPTOUT_RE,
    PY_OPTOUT_RE,
    OptOut,
    apply_optouts,
    module_optouts,
    parse_optouts,
    stale,
)
from rtm_lakebase.check.python import PYTHON_LANGS, check_python_source

from .excerpts import EXCERPT_RE, region
from .markdown import Block, Document

__all__ = ["OPTOUT_RE", "PY_OPTOUT_RE", "PYTHON_LANGS", "OptOut", "apply_optouts", "check_document",
           "check_excerpt", "check_module", "check_python_source", "parse_optouts", "stale"]


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
        if not block.lang:
            out.append(Finding(path, block.start, block.indent + 1, "FENCE001", "fenced block has no language tag"))
        if not block.closed:
            out.append(Finding(path, block.start, block.indent + 1, "FENCE002",
                               f"fence opened here is never closed (runs to line {block.end})"))
        out += check_block(block, path)
        excerpt_comments = [(ln, EXCERPT_RE.match(body)) for ln, body in block.comments]
        for ln, m in excerpt_comments:
            if m:
                out += check_excerpt(block, path, ln, m.group("path"), m.group("name"), read_module)
    # Excerpt comments not directly above a fence.
    fence_comment_lines = {ln for b in doc.blocks for ln, _ in b.comments}
    for line, body in doc.comments:
        if body.startswith("excerpt:") and line not in fence_comment_lines:
            out.append(Finding(path, line, 1, "EXC004", "excerpt comment is not directly followed by a fenced block"))
    for line in doc.unclosed_comments:
        out.append(Finding(path, line, 1, "HTML001", "HTML comment opened here is never closed with '-->'"))
    for para in doc.paragraphs:
        out += check_paragraph(para, path)
    return out


def check_module(path: str, source: str) -> tuple[list[Finding], ast.Module | None]:
    """Rules for an example module, with ``# skills: allow CODE -- reason`` on the line or the line above."""
    findings, tree = check_python_source(source, path)
    out = module_optouts(source, path, findings)
    if tree is not None and not ast.get_docstring(tree) and source.strip():
        out.append(Finding(path, 1, 1, "EX001", "module has no docstring"))
    return out, tree
