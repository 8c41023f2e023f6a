"""The routing table in SKILL.md: which reference to read when, and that every reference is listed."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from urllib.parse import unquote

from rtm_lakebase.check.findings import Finding

from .markdown import Document

READ_WHEN_RE = re.compile(r"read\s+when", re.I)


@dataclass
class Route:
    reference: str  # path relative to the pack root, e.g. references/sink.md
    read_when: str
    line: int


def routes(doc: Document) -> tuple[list[Route], bool]:
    """Rows of every table whose header has a 'Read when' column; second value: such a table exists.

    Tables come from markdown-it's table tokens (so a '|' in a code span or escaped as '\\|' stays in
    its cell, and tables inside code blocks are not tables).
    """
    found: list[Route] = []
    has_table = False
    for table in doc.tables:
        col = next((k for k, h in enumerate(table.header) if READ_WHEN_RE.search(h.plain)), None)
        if col is None:
            continue
        has_table = True
        for line, cells in table.rows:
            read_when = cells[col].plain if col < len(cells) else ""
            for cell in cells:
                for href in cell.hrefs:
                    target = unquote(href.split("#")[0])
                    ref = posixpath.normpath(posixpath.join(posixpath.dirname(doc.path), target))
                    if ref.startswith("references/") and ref.endswith(".md"):
                        found.append(Route(ref, read_when, line))
    return found, has_table


def check_routing(doc: Document, references: list[str]) -> list[Finding]:
    out: list[Finding] = []
    table, has_table = routes(doc)
    if not has_table:
        out.append(Finding(doc.path, doc.body_start, 1, "ROUTE001",
                           "no routing table: add a Markdown table with a 'Read when' column linking each reference"))
        return out
    listed = {r.reference for r in table}
    for r in table:
        if not r.read_when:
            out.append(Finding(doc.path, r.line, 1, "ROUTE001", f"{r.reference}: the 'Read when' cell is empty"))
    for ref in references:
        if ref.count("/") > 1:
            out.append(Finding(ref, 1, 1, "ROUTE002", "references must sit directly in references/ (one level deep)"))
        if ref not in listed:
            out.append(Finding(doc.path, doc.body_start, 1, "ROUTE001", f"{ref} is not listed in the routing table"))
    for r in table:
        if r.reference.count("/") > 1 and r.reference not in references:
            out.append(Finding(doc.path, r.line, 1, "ROUTE002", f"{r.reference}: link references one level deep"))
    return out


def read_when_map(doc: Document) -> dict[str, str]:
    result: dict[str, str] = {}
    for r in routes(doc)[0]:
        result.setdefault(r.reference, r.read_when)
    return result
