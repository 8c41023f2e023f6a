"""The routing table in SKILL.md: which reference to read when, and that every reference is listed."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from .findings import Finding
from .markdown import LINK_RE, Document, strip_inline_code

READ_WHEN_RE = re.compile(r"read\s+when", re.I)


@dataclass
class Route:
    reference: str  # path relative to the pack root, e.g. references/sink.md
    read_when: str
    line: int


def _cells(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", body)]


def _plain(cell: str) -> str:
    cell = LINK_RE.sub(lambda m: m.group("text"), cell)
    return re.sub(r"\s+", " ", cell.replace("\\|", "|")).strip()


def routes(doc: Document) -> tuple[list[Route], bool]:
    """Rows of every table whose header has a 'Read when' column; second value: such a table exists."""
    found: list[Route] = []
    has_table = False
    in_fence = {ln for b in doc.blocks for ln in range(b.start, b.end + 1)}
    lines = doc.lines
    i = doc.body_start - 1
    while i < len(lines) - 1:
        if i + 1 in in_fence or not lines[i].lstrip().startswith("|"):
            i += 1
            continue
        header = _cells(lines[i])
        sep = lines[i + 1].strip()
        if not re.match(r"^\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?$", sep):
            i += 1
            continue
        col = next((k for k, h in enumerate(header) if READ_WHEN_RE.search(h)), None)
        j = i + 2
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            if col is not None:
                cells = _cells(lines[j])
                row_links = [m.group("target") for m in LINK_RE.finditer(strip_inline_code(lines[j]))]
                read_when = _plain(cells[col]) if col < len(cells) else ""
                for target in row_links:
                    ref = posixpath.normpath(posixpath.join(posixpath.dirname(doc.path), target.split("#")[0]))
                    if ref.startswith("references/") and ref.endswith(".md"):
                        found.append(Route(ref, read_when, j + 1))
            j += 1
        if col is not None:
            has_table = True
        i = j
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
