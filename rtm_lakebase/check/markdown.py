"""Markdown: fenced code blocks get the Python rules (``python``) or the prose rules, paragraphs the prose rules.

:func:`read` is a small line scanner (standard library only) that finds what
the rules need the way CommonMark reads it: fenced blocks (with their
language, indentation, whether they are closed, and the one-line HTML
comments right above them, also inside list items and block quotes), and
paragraphs, headings (ATX and setext), list items and tables as prose, with
lazy continuation lines; indented code blocks, HTML blocks and multi-line
comments are neither. It does not build a full CommonMark tree (no inline
parsing, no link references): ``tests/test_check_shipped.py`` checks that its
findings equal those of the validator's markdown-it parser on every Markdown
file of the repository and on generated documents mixing these constructs.
:func:`check_block` and :func:`check_paragraph` are the rules' entry points
for one block or paragraph; the pack's validator calls them too, on the
blocks and paragraphs of its own parser.

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
FENCE_RE = re.compile(r"^(?P<indent> *)(?P<quote>(?:>\s?)*)(?P<item>(?:[-*+]|\d{1,9}[.)]) +)?"
                      r"(?P<marker>`{3,}|~{3,})(?P<info>.*)$")
HEADING_RE = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
LIST_ITEM_RE = re.compile(r"^\s*(?:>\s*)*(?:[-*+]|\d{1,9}[.)])(?:\s|$)")
QUOTE_RE = re.compile(r"^ {0,3}>")
ITEM_WIDTH_RE = re.compile(r"^ *(?:> ?)*(?:[-*+]|\d{1,9}[.)])(?: {1,4}(?! )|$)")
SETEXT_RE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
TABLE_DELIMITER_RE = re.compile(r"^ {0,3}[|:-][-:|\s]*$")
HR_RE = re.compile(r"^ {0,3}(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,})$")
HTML_START_RE = re.compile(r"^ {0,3}<(?:/?(?P<tag>[A-Za-z][A-Za-z0-9-]*)(?:\s|/?>|$)|\?|![A-Z])")
#: HTML tags that start a block even in the middle of a paragraph (CommonMark's HTML block type 6).
BLOCK_TAGS = frozenset(
    "address article aside base basefont blockquote body caption center col colgroup dd details dialog dir div dl "
    "dt fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 head header hr html iframe legend "
    "li link main menu menuitem nav noframes ol optgroup option p param search section summary table tbody td "
    "tfoot th thead title tr track ul".split())


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


def _item_width(line: str) -> int:
    """Column where a list item's content starts (``- x``: 2, ``10. x``: 4)."""
    m = ITEM_WIDTH_RE.match(line.expandtabs(4))
    return len(m.group(0)) if m else 0


def _base(indent: int, list_indent: int) -> int:
    """The indentation a line's own indentation counts from: the list item's content, if the line is inside it."""
    return list_indent if list_indent and indent >= list_indent else 0


def _continues(paragraph: Paragraph, line: str) -> bool:
    """A list item that cannot interrupt ``paragraph``: numbered other than 1, or empty (CommonMark)."""
    if LIST_ITEM_RE.match(paragraph.lines[0][1]):
        return False
    m = re.match(r"^ {0,3}(?:(?P<num>\d{1,9})[.)]|[-*+])(?P<rest>.*)$", line)
    return bool(m) and ((m.group("num") is not None and m.group("num") != "1") or not m.group("rest").strip())


def _can_continue(line: str) -> bool:
    """Whether ``line`` may be a lazy continuation of an open paragraph (it starts no block of its own)."""
    expanded = line.expandtabs(4)
    return not (FENCE_RE.match(expanded) or LIST_ITEM_RE.match(line) or HEADING_RE.match(line)
                or HR_RE.match(line) or line.lstrip().startswith("<!--"))


def _lazy(paragraph: Paragraph, line: str) -> bool:
    """Whether ``line`` can only continue ``paragraph`` lazily: it sits left of the list item or outside the quote."""
    first = paragraph.lines[0][1]
    return bool(LIST_ITEM_RE.match(first) and _indent(line) < _item_width(first)) or bool(QUOTE_RE.match(first) and not QUOTE_RE.match(line))


def read(path: str, text: str) -> Document:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    blocks: list[Block] = []
    paragraphs: list[Paragraph] = []
    pending: list[tuple[int, str]] = []
    current: Paragraph | None = None
    list_indent = 0  # column where the current list item's content starts (0: not in a list)
    list_quoted = False  # that list item is inside a block quote
    is_table = False
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
        if list_quoted and not QUOTE_RE.match(line) and line.strip() and (
                current is None or not _can_continue(line)):
            list_indent, list_quoted = 0, False  # a line outside the block quote ends the list inside it
        fence = FENCE_RE.match(line.expandtabs(4))
        if fence and len(fence.group("indent")) - _base(len(fence.group("indent")), list_indent) < 4 and not (
                fence.group("marker")[0] == "`" and "`" in fence.group("info")):
            end_paragraph()
            marker, quote = fence.group("marker"), fence.group("quote")
            indent = len(fence.group("indent"))
            # a fence opening a list item (`- ```python`): its lines are indented to the item's content
            content_indent = fence.start("marker") - len(quote) if fence.group("item") else indent
            if fence.group("item"):
                list_indent, list_quoted = content_indent, bool(quote)
            elif indent < list_indent:
                list_indent = 0
            info = fence.group("info").strip()
            lang = info.split()[0].lower().lstrip("{.").rstrip("}") if info else ""
            # the list item or block quote holding the fence: a line outside it ends the block, unclosed
            container = content_indent if fence.group("item") else _base(indent, list_indent)
            body: list[str] = []
            j, closed = i + 1, False
            while j < n:
                inner = lines[j].expandtabs(4)
                if inner.strip() and (_indent(inner) < container or (quote and not QUOTE_RE.match(inner))):
                    break
                if quote:
                    inner = re.sub(r"^ *(?:>\s?)*", "", inner)
                close = inner.lstrip(" ")
                run = len(close) - len(close.lstrip(marker[0]))
                if run >= len(marker) and not close[run:].strip() and _indent(inner) < 4 + content_indent:
                    closed = True
                    break
                # content loses up to the fence's own indentation, as CommonMark says
                body.append(inner[min(content_indent, _indent(inner)):])
                j += 1
            end = j + 1 if closed else j
            blocks.append(Block(lang, info, ln, end, indent, body, pending, closed))
            pending = []
            i = j + 1 if closed else j
            continue
        if not stripped:
            end_paragraph()
            i += 1
            continue
        if _indent(line) < list_indent and not LIST_ITEM_RE.match(line) and (
                current is None or stripped.startswith("<!--") or HR_RE.match(line) or HEADING_RE.match(line)):
            list_indent = 0  # a block left of the list item's content ends the list
        comment = COMMENT_RE.match(line) if _indent(line) < 4 else None
        if comment:  # a comment line ends a paragraph; it belongs to what follows
            end_paragraph()
            pending.append((ln, comment.group("body").strip()))
            i += 1
            continue
        if stripped.startswith("<!--") and _indent(line) < 4:  # a comment over several lines: not prose
            end_paragraph()
            while i < n and "-->" not in lines[i]:
                i += 1
            pending = []
            i += 1
            continue
        html = HTML_START_RE.match(line)
        if html and (current is None or html.group("tag").lower() in BLOCK_TAGS):
            end_paragraph()  # an HTML block runs to the next blank line
            while i < n and lines[i].strip():
                i += 1
            pending = []
            continue
        if current is not None and not is_table and SETEXT_RE.match(line) and not _lazy(current, line):
            current.lines.append((ln, line))  # the underline of a heading: the heading ends here
            end_paragraph()
            i += 1
            continue
        if HR_RE.match(line):
            end_paragraph()
            list_indent = list_indent if _indent(line) >= list_indent else 0
            pending = []
            i += 1
            continue
        if is_table and _indent(line) >= 4:  # a table ends at an indented line
            end_paragraph()
        quoted = QUOTE_RE.match(line) is not None
        if quoted and current is not None and not QUOTE_RE.match(current.lines[0][1]):
            end_paragraph()  # a block quote interrupts a paragraph
        base = _base(_indent(line), list_indent)
        if current is None and _indent(line) - base >= 4:  # an indented code block
            while i < n and (not lines[i].strip() or _indent(lines[i]) - base >= 4):
                i += 1
            pending = []
            continue
        if LIST_ITEM_RE.match(line) and not (current is not None and _continues(current, line)):
            list_indent, list_quoted = _item_width(line), QUOTE_RE.match(line) is not None
            end_paragraph()
        elif current is None and _indent(line) < list_indent:
            list_indent = 0
        if HEADING_RE.match(line):
            end_paragraph()
            paragraphs.append(Paragraph([(ln, line)], pending))
            pending = []
            i += 1
            continue
        if (current is not None and "|" in line and i + 1 < n and "-" in lines[i + 1]
                and TABLE_DELIMITER_RE.match(lines[i + 1]) and not _lazy(current, line)):
            end_paragraph()  # a table's header row interrupts a paragraph
        if current is None:
            current = Paragraph([], pending)
            pending = []
            is_table = False
        elif len(current.lines) == 1 and "|" in current.lines[0][1] and TABLE_DELIMITER_RE.match(line):
            is_table = True
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
