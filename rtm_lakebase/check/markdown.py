"""Markdown: fenced code blocks get the Python rules (``python``) or the prose rules, paragraphs the prose rules.

:func:`read` is a small line scanner (standard library only) that finds what
the rules need, the way CommonMark reads it for ordinary documents: fenced
blocks (with their language, indentation, whether they are closed, and the
one-line HTML comments right above them), and paragraphs, headings, list
items and tables as prose. Indented code blocks, HTML blocks and multi-line
comments are neither. :func:`check_block` and :func:`check_paragraph` are
the rules' entry points for one block or paragraph; the pack's validator
calls them too, on the blocks and paragraphs of its own (markdown-it) parser.

Opt-out: ``<!-- skills: allow CODE -- reason -->`` on the line right before
a fence or a paragraph.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.optouts import apply_optouts, parse_optouts, stale
from rtm_lakebase.check.python import PYTHON_LANGS, check_python_source
from rtm_lakebase.check.rules.prose import check_text

COMMENT_RE = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$")
FENCE_RE = re.compile(r"^(?P<indent> *)(?P<quote>(?:>\s?)*)(?P<marker>`{3,}|~{3,})(?P<info>.*)$")
HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
LIST_ITEM_RE = re.compile(r"^\s*(?:>\s*)*(?:[-*+]|\d{1,9}[.)])(?:\s|$)")
HR_RE = re.compile(r"^ {0,3}(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$")
HTML_START_RE = re.compile(r"^ {0,3}<(?:/?[A-Za-z][A-Za-z0-9-]*(?:\s|/?>|$)|!--|\?|![A-Z])")


@dataclass
class Block:
    """A fenced code block. ``start``/``end`` are the 1-based lines of its opening and closing fence."""

    lang: str
    info: str
    start: int
    end: int
    indent: int  # column of the fence marker on its line (list items indent it)
    lines: list[str]
    comments: list[tuple[int, str]] = field(default_factory=list)  # one-line HTML comments right above
    closed: bool = True

    @property
    def content_start(self) -> int:
        return self.start + 1

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


@dataclass
class Paragraph:
    """A paragraph, heading, list item or table: its source lines, and the one-line HTML comments right above it."""

    lines: list[tuple[int, str]]
    comments: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Document:
    path: str
    blocks: list[Block]
    paragraphs: list[Paragraph]


def _front_matter_end(lines: list[str]) -> int:
    """Number of lines of a ``---`` ... ``---`` block at the top (0 if none)."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return i + 1
    return 0


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip(" "))


def read(path: str, text: str) -> Document:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks: list[Block] = []
    paragraphs: list[Paragraph] = []
    pending: list[tuple[int, str]] = []
    current: Paragraph | None = None
    in_list = False
    i = _front_matter_end(lines)
    n = len(lines)

    def end_paragraph() -> None:
        nonlocal current
        if current is not None:
            paragraphs.append(current)
        current = None

    while i < n:
        line, ln = lines[i], i + 1
        stripped = line.strip()
        fence = FENCE_RE.match(line.expandtabs(4))
        if fence and len(fence.group("indent")) < 4 + (4 if in_list else 0) and not (
                fence.group("marker")[0] == "`" and "`" in fence.group("info")):
            end_paragraph()
            marker, quote = fence.group("marker"), fence.group("quote")
            indent = len(fence.group("indent"))
            info = fence.group("info").strip()
            lang = info.split()[0].lower().lstrip("{.").rstrip("}") if info else ""
            body: list[str] = []
            j, closed = i + 1, False
            while j < n:
                inner = lines[j].expandtabs(4)
                if quote:
                    inner = re.sub(r"^ *(?:>\s?)*", "", inner)
                close = inner.lstrip(" ")
                run = len(close) - len(close.lstrip(marker[0]))
                if run >= len(marker) and not close[run:].strip() and _indent(inner) < 4 + indent:
                    closed = True
                    break
                # content loses up to the fence's own indentation, as CommonMark says
                body.append(inner[min(indent, _indent(inner)):])
                j += 1
            end = j + 1 if closed else j
            blocks.append(Block(lang, info, ln, end, indent + len(quote), body, pending, closed))
            pending = []
            i = j + 1
            continue
        if not stripped:
            end_paragraph()
            i += 1
            continue
        comment = COMMENT_RE.match(line)
        if comment and current is None:
            pending.append((ln, comment.group("body").strip()))
            i += 1
            continue
        if current is None and stripped.startswith("<!--"):  # a comment over several lines: not prose
            while i < n and "-->" not in lines[i]:
                i += 1
            pending = []
            i += 1
            continue
        if current is None and HTML_START_RE.match(line):  # an HTML block runs to the next blank line
            while i < n and lines[i].strip():
                i += 1
            pending = []
            continue
        if HR_RE.match(line) and not (current is not None and set(stripped) <= {"-", " "}):
            end_paragraph()
            pending = []
            i += 1
            continue
        if current is None and _indent(line) >= 4 and not in_list:  # an indented code block
            while i < n and (not lines[i].strip() or _indent(lines[i]) >= 4):
                i += 1
            pending = []
            continue
        if LIST_ITEM_RE.match(line):
            in_list = True
            end_paragraph()
        elif current is None and _indent(line) == 0:
            in_list = False
        if HEADING_RE.match(line):
            end_paragraph()
            paragraphs.append(Paragraph([(ln, line)], pending))
            pending = []
            i += 1
            continue
        if current is None:
            current = Paragraph([], pending)
            pending = []
        current.lines.append((ln, line))
        i += 1
    end_paragraph()
    return Document(path, blocks, paragraphs)


def check_block(block: Block, path: str) -> list[Finding]:
    """One fenced block with its opt-outs: the Python rules for ``python``, the prose rules for other text."""
    optouts, out = parse_optouts(block.comments, path)
    found: list[Finding] = []
    if block.lang in PYTHON_LANGS:
        found, _ = check_python_source(block.source, path, block.start, block.indent)
    else:
        for ln, text in enumerate(block.lines, block.content_start):
            found += check_text([(ln, block.indent, text)], path)
    return out + apply_optouts(found, optouts) + stale(optouts, path)


def check_paragraph(paragraph: Paragraph, path: str) -> list[Finding]:
    """One paragraph's prose rules, with its opt-outs."""
    optouts, out = parse_optouts(paragraph.comments, path)
    found = check_text([(ln, 0, text) for ln, text in paragraph.lines], path)
    return out + apply_optouts(found, optouts) + stale(optouts, path)


def check_markdown_file(path: str, text: str) -> list[Finding]:
    doc = read(path, text)
    out: list[Finding] = []
    for block in doc.blocks:
        out += check_block(block, path)
    for paragraph in doc.paragraphs:
        out += check_paragraph(paragraph, path)
    return out
