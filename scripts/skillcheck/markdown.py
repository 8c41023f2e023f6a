"""Markdown scanning on markdown-it-py tokens (CommonMark, with line maps): fences, headings, links, prose.

``parse(path, text)`` returns a :class:`Document`. Front matter (``---`` ...
``---`` at the top) is blanked before parsing so that line numbers stay those
of the file. What the checks get:

- ``blocks``: fenced code blocks (``fence`` tokens), with the one-line HTML
  comments directly above them (opt-outs, excerpt markers) and whether the
  fence was closed (an unclosed fence runs to the end of its container and
  is reported as FENCE002);
- ``headings`` (``heading_open`` + its inline source), ``links`` (``link_open``
  and ``image`` tokens, plus reference definitions), ``paragraphs`` (the lines of
  each paragraph, heading and table, for the prose rules) and ``html_ids``;
- ``unclosed_comments``: lines where an HTML comment opens and never closes.

Heading anchors are computed by :mod:`skillcheck.anchors` with Python-Markdown's
own ``toc`` extension, as MkDocs renders them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

from rtm_lakebase.check.markdown import Block  # one fenced-block type for the validator and the shipped checker

from .limits import MAX_EMPHASIS_MARKERS

COMMENT_RE = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$", re.S)
HTML_ID_RE = re.compile(r"<a\s[^>]*?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
INLINE_CODE_RE = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: Link syntax for text outside a parsed document (routing-table cells).
LINK_RE = re.compile(r"(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(?P<target><[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")

_MD = MarkdownIt("commonmark").enable("table")
#: For documents with more than MAX_EMPHASIS_MARKERS '*'/'_': markdown-it-py 3.0 (the version mkdocs-llmstxt
#: allows) needs memory quadratic in the emphasis delimiters of one paragraph (16,000 take ~750 MB).
_MD_NO_EMPHASIS = MarkdownIt("commonmark").enable("table").disable("emphasis")
#: A CommonMark backslash escape: backslash + ASCII punctuation.
_ESCAPE_RE = re.compile(r"\\([!-/:-@\[-`{-~])")


@dataclass
class Heading:
    level: int
    text: str  # the heading's inline Markdown source
    line: int


@dataclass
class Link:
    target: str
    line: int
    col: int
    text: str


@dataclass
class Paragraph:
    """A paragraph, heading or table: its source lines, and the one-line HTML comments right above it."""

    lines: list[tuple[int, str]]
    comments: list[tuple[int, str]] = field(default_factory=list)


@dataclass
class Cell:
    text: str  # the cell's inline source, escapes resolved ('\\|' -> '|')
    plain: str  # the source with links reduced to their text, whitespace collapsed
    hrefs: list[str]  # link destinations in the cell, as markdown-it parsed them


@dataclass
class Table:
    line: int  # line of the header row
    header: list[Cell]
    rows: list[tuple[int, list[Cell]]]  # (line, cells) per body row


@dataclass
class Document:
    path: str
    text: str
    lines: list[str]
    front_matter: tuple[int, int] | None  # (first, last) line numbers of the '---' delimiters
    blocks: list[Block]
    headings: list[Heading]
    links: list[Link]
    paragraphs: list[Paragraph]
    html_ids: set[str]
    comments: list[tuple[int, str]] = field(default_factory=list)  # every one-line HTML comment (line, body)
    unclosed_comments: list[int] = field(default_factory=list)
    first_block: str | None = None  # type of the first block token after front matter (e.g. "heading_open")
    second_block: tuple[str, int] | None = None  # (type, 1-based line) of the block after it
    code_lines: set[int] = field(default_factory=set)
    tables: list[Table] = field(default_factory=list)
    degraded: str = ""  # why part of the syntax was not parsed (a limit was hit), or ""

    @property
    def body_start(self) -> int:
        return self.front_matter[1] + 1 if self.front_matter else 1

    def in_code(self, lineno: int) -> bool:
        """True when 1-based ``lineno`` belongs to a code block (fenced or indented), fences included."""
        return lineno in self.code_lines


def find_front_matter(lines: list[str]) -> tuple[int, int] | None:
    if not lines or lines[0].rstrip() != "---":
        return None
    for i in range(1, len(lines)):
        if lines[i].rstrip() in ("---", "..."):
            return (1, i + 1)
    return None


def strip_inline_code(text: str) -> str:
    """Blank out inline code spans (same length) so links inside them are not seen."""
    return INLINE_CODE_RE.sub(lambda m: " " * len(m.group(0)), text)


def _fence_closed(token: Token, lines: list[str]) -> bool:
    """Whether the fence's last mapped line is a closing fence (markdown-it closes it at the container's end)."""
    last = token.map[1] - 1
    if last <= token.map[0] or last >= len(lines):
        return False
    text = lines[last].lstrip(" \t>")  # inside a blockquote the line keeps its '>' prefix
    marker = token.markup[0]
    run = len(text) - len(text.lstrip(marker))
    return run >= len(token.markup) and not text[run:].strip()


def _comment_body(content: str) -> str | None:
    m = COMMENT_RE.match(content)
    if not m or "\n" in content.strip():
        return None
    return m.group("body").strip()


def _unclosed_comment_lines(token: Token, base_line: int) -> list[int]:
    """Line of a ``<!--`` with no ``-->`` after it in an inline token's source (code spans excluded)."""
    source = strip_inline_code(token.content)
    opened = source.rfind("<!--")
    if opened < 0 or "-->" in source[opened:]:
        return []
    return [base_line + source[:opened].count("\n")]


def parse(path: str, text: str) -> Document:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    fm = find_front_matter(lines)
    body_lines = ([""] * fm[1] + lines[fm[1]:]) if fm else lines
    env: dict = {}
    markers = text.count("*") + text.count("_")
    parser = _MD if markers <= MAX_EMPHASIS_MARKERS else _MD_NO_EMPHASIS
    tokens = parser.parse("\n".join(body_lines) + "\n", env)

    blocks: list[Block] = []
    headings: list[Heading] = []
    links: list[Link] = []
    paragraphs: list[Paragraph] = []
    html_ids: set[str] = set()
    comments: list[tuple[int, str]] = []
    unclosed: list[int] = []
    code_lines: set[int] = set()
    pending: list[tuple[int, str]] = []
    block_order: list[tuple[str, int]] = []
    tables: list[Table] = []
    row_line = 0

    for i, tok in enumerate(tokens):
        if tok.map is not None and tok.level == 0 and tok.nesting >= 0:
            block_order.append((tok.type, tok.map[0] + 1))
        if tok.type == "html_block":
            start = tok.map[0] + 1
            body = _comment_body(tok.content)
            html_ids.update(HTML_ID_RE.findall(tok.content))
            if body is not None:
                pending.append((start, body))
                comments.append((start, body))
            else:
                stripped = strip_inline_code(tok.content)
                opened = stripped.rfind("<!--")
                if opened >= 0 and "-->" not in stripped[opened:]:
                    unclosed.append(start + stripped[:opened].count("\n"))
                pending = []
            continue
        if tok.type == "fence":
            start, stop = tok.map[0] + 1, tok.map[1]
            closed = _fence_closed(tok, body_lines)
            info = tok.info.strip()
            lang = info.split()[0].lower().lstrip("{.").rstrip("}") if info else ""
            opener = body_lines[start - 1]
            indent = len(opener.expandtabs(4)) - len(opener.expandtabs(4).lstrip(" "))
            content = tok.content.split("\n")
            if content and content[-1] == "":
                content = content[:-1]
            blocks.append(Block(lang, info, start, stop, indent, content, pending, closed))
            code_lines.update(range(start, stop + 1))
            pending = []
            continue
        if tok.type == "code_block":
            code_lines.update(range(tok.map[0] + 1, tok.map[1] + 1))
            pending = []
            continue
        if tok.type == "tr_open":
            row_line = tok.map[0] + 1 if tok.map else row_line
            if tables:
                if tables[-1].line == 0:
                    tables[-1].line = row_line
                else:
                    tables[-1].rows.append((row_line, []))
        if tok.type == "inline" and tables and i > 0 and tokens[i - 1].type in ("th_open", "td_open"):
            cell = _cell(tok)
            if tokens[i - 1].type == "th_open":
                tables[-1].header.append(cell)
            elif tables[-1].rows:
                tables[-1].rows[-1][1].append(cell)
        if tok.type == "table_open":
            tables.append(Table(0, [], []))
        if tok.type in ("paragraph_open", "heading_open", "table_open"):
            start, stop = tok.map[0] + 1, tok.map[1]
            paragraphs.append(Paragraph([(ln, body_lines[ln - 1]) for ln in range(start, stop + 1)
                                         if ln - 1 < len(body_lines)], pending))
            pending = []
            if tok.type == "heading_open":
                inline = tokens[i + 1] if i + 1 < len(tokens) else None
                text_src = inline.content if inline is not None and inline.type == "inline" else ""
                headings.append(Heading(int(tok.tag[1]), " ".join(text_src.split("\n")).strip(), start))
            continue
        if tok.type == "hr":
            pending = []
            continue
        if tok.type == "inline" and tok.map is not None:
            start, stop = tok.map[0] + 1, tok.map[1]
            unclosed += _unclosed_comment_lines(tok, start)
            hrefs: dict[str, int] = {}
            for child in tok.children or []:
                if child.type == "html_inline":
                    html_ids.update(HTML_ID_RE.findall(child.content))
                elif child.type in ("link_open", "image") and child.markup != "autolink":
                    href = str(child.attrGet("href" if child.type == "link_open" else "src") or "")
                    hrefs[href] = hrefs.get(href, 0) + 1
            if hrefs:
                links += _locate_links(body_lines, start, stop, hrefs)
            continue

    # Reference definitions: markdown-it keeps them in env; place each on its definition line.
    references = env.get("references", {})
    if references:
        for ln, raw in enumerate(body_lines, 1):
            if ln in code_lines or not raw.lstrip().startswith("["):
                continue
            m = re.match(r"^ {0,3}\[(?P<label>[^\]]+)\]:\s*(?P<target><[^>]*>|\S+)", raw)
            if m:
                links.append(Link(m.group("target").strip("<>"), ln, m.start("target") + 1, m.group("label")))

    first = block_order[0][0] if block_order else None
    second = block_order[1] if len(block_order) > 1 else None
    degraded = "" if parser is _MD else (f"{markers:,} emphasis markers ('*', '_'), over the limit of "
                                         f"{MAX_EMPHASIS_MARKERS:,}: emphasis was not parsed")
    return Document(path, text, lines, fm, blocks, headings, links, paragraphs, html_ids, comments,
                    sorted(set(unclosed)), first, second, code_lines, tables, degraded)


def _cell(token: Token) -> Cell:
    """A table cell: its source, that source with links reduced to their text (markup kept), its hrefs."""
    hrefs = [str(c.attrGet("href") or "") for c in token.children or [] if c.type == "link_open"]
    plain = LINK_RE.sub(lambda m: m.group("text"), token.content)
    return Cell(token.content, " ".join(plain.split()), hrefs)


def _locate_links(lines: list[str], start: int, stop: int, hrefs: dict[str, int]) -> list[Link]:
    """Inline links of lines start..stop whose destination markdown-it parsed as a link (code spans skipped).

    Reference-style links are not placed here: their definition line is checked instead.
    """
    out = []
    for ln in range(start, min(stop, len(lines)) + 1):
        for m in LINK_RE.finditer(strip_inline_code(lines[ln - 1])):
            target = m.group("target")
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            key = _MD.normalizeLink(_ESCAPE_RE.sub(r"\1", target))
            if hrefs.get(key, 0) > 0:
                hrefs[key] -= 1
                out.append(Link(target, ln, m.start() + 1, m.group("text")))
    return out
