"""Line-based Markdown scanning: front matter, fenced blocks, headings, links and prose, with line numbers.

Not a full CommonMark parser: it handles what the pack uses (backtick/tilde
fences, possibly indented inside list items; ATX headings; inline links,
images and reference definitions; HTML comments right above a fence).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

FENCE_RE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
HEADING_RE = re.compile(r"^ {0,3}(?P<hashes>#{1,6})(?:[ \t]+(?P<text>.*?))?[ \t]*#*[ \t]*$")
COMMENT_LINE_RE = re.compile(r"^\s*<!--(?P<body>.*?)-->\s*$")
LINK_RE = re.compile(r"(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(?P<target><[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)")
REFDEF_RE = re.compile(r"^ {0,3}\[(?P<label>[^\]]+)\]:\s*(?P<target><[^>]*>|\S+)")
INLINE_CODE_RE = re.compile(r"(`+)(?:(?!\1).)+?\1")
HTML_ID_RE = re.compile(r"<a\s[^>]*(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)


@dataclass
class Block:
    """A fenced code block. ``start`` is the 1-based line of the opening fence."""

    lang: str
    info: str
    start: int
    end: int  # line of the closing fence (or last line if unclosed)
    indent: int
    lines: list[str]
    comments: list[tuple[int, str]] = field(default_factory=list)  # HTML comment lines right above the fence
    closed: bool = True

    @property
    def content_start(self) -> int:
        return self.start + 1

    @property
    def source(self) -> str:
        return "\n".join(self.lines) + ("\n" if self.lines else "")


@dataclass
class Heading:
    level: int
    text: str
    line: int


@dataclass
class Link:
    target: str
    line: int
    col: int
    text: str


@dataclass
class Paragraph:
    """Consecutive prose lines outside fences (line numbers kept per line)."""

    lines: list[tuple[int, str]]
    comments: list[tuple[int, str]] = field(default_factory=list)


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

    @property
    def body_start(self) -> int:
        return self.front_matter[1] + 1 if self.front_matter else 1

    def in_code(self, lineno: int) -> bool:
        """True when 1-based ``lineno`` is part of a fenced code block (fences included)."""
        return any(b.start <= lineno <= b.end for b in self.blocks)


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


def parse(path: str, text: str) -> Document:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    fm = find_front_matter(lines)
    blocks: list[Block] = []
    headings: list[Heading] = []
    links: list[Link] = []
    paragraphs: list[Paragraph] = []
    html_ids: set[str] = set()
    pending_comments: list[tuple[int, str]] = []
    current: Paragraph | None = None
    i = fm[1] if fm else 0
    while i < len(lines):
        raw = lines[i]
        lineno = i + 1
        m = FENCE_RE.match(raw)
        if m and not (m.group("fence")[0] == "`" and "`" in m.group("info")):
            fence = m.group("fence")
            indent = len(m.group("indent").expandtabs(4))
            info = m.group("info").strip()
            lang = info.split()[0].lower() if info else ""
            lang = lang.lstrip("{.").rstrip("}")
            body: list[str] = []
            j = i + 1
            closed = False
            while j < len(lines):
                cm = FENCE_RE.match(lines[j])
                if (cm and cm.group("fence")[0] == fence[0] and len(cm.group("fence")) >= len(fence)
                        and not cm.group("info").strip()):
                    closed = True
                    break
                body.append(_dedent_line(lines[j], indent))
                j += 1
            blocks.append(Block(lang, info, lineno, j + 1 if closed else len(lines), indent, body,
                                list(pending_comments), closed))
            pending_comments = []
            current = None
            i = j + 1
            continue
        if raw.lstrip().startswith("<!--") and "-->" not in raw:
            # A multi-line HTML comment: not prose, not an opt-out (those are one line).
            while i < len(lines) and "-->" not in lines[i]:
                i += 1
            current = None
            pending_comments = []
            i += 1
            continue
        cm = COMMENT_LINE_RE.match(raw)
        if cm:
            pending_comments.append((lineno, cm.group("body").strip()))
            current = None
            i += 1
            continue
        if not raw.strip():
            current = None
            i += 1
            continue
        hm = HEADING_RE.match(raw)
        if hm:
            headings.append(Heading(len(hm.group("hashes")), (hm.group("text") or "").strip(), lineno))
        if current is None:
            current = Paragraph([], pending_comments)
            paragraphs.append(current)
        pending_comments = []
        current.lines.append((lineno, raw))
        if hm:
            current = None
        scan = strip_inline_code(raw)
        for lm in LINK_RE.finditer(scan):
            target = lm.group("target")
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            links.append(Link(target, lineno, lm.start() + 1, lm.group("text")))
        rm = REFDEF_RE.match(scan)
        if rm:
            target = rm.group("target").strip("<>")
            links.append(Link(target, lineno, rm.start("target") + 1, rm.group("label")))
        html_ids.update(HTML_ID_RE.findall(raw))
        i += 1
    return Document(path, text, lines, fm, blocks, headings, links, paragraphs, html_ids)


def _dedent_line(line: str, indent: int) -> str:
    expanded = line.expandtabs(4)
    prefix = len(expanded) - len(expanded.lstrip(" "))
    return expanded[min(indent, prefix):]


# --- heading slugs (Python-Markdown toc defaults, as MkDocs uses them) ---------------------------

_MD_INLINE = [
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links/images -> their text
    (re.compile(r"<[^>]+>"), ""),  # inline HTML tags
    (re.compile(r"(`+)(.+?)\1"), r"\2"),  # code spans -> content
    (re.compile(r"(\*\*|__)(.+?)\1"), r"\2"),  # bold
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*"), r"\1"),  # *em*
    (re.compile(r"(?<!\w)_(?!\s)(.+?)(?<!\s)_(?!\w)"), r"\1"),  # _em_
]


def heading_plain_text(text: str) -> str:
    """The rendered text of an ATX heading's inline Markdown (what the toc extension slugifies)."""
    for pattern, repl in _MD_INLINE:
        text = pattern.sub(repl, text)
    return text.replace("\\", "")


def slugify(value: str, separator: str = "-") -> str:
    """Python-Markdown ``toc.slugify`` (non-unicode): NFKD to ASCII, drop punctuation, lowercase, join with '-'."""
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[{}\s]+".format(re.escape(separator)), separator, value)


def anchors(doc: Document) -> set[str]:
    """All anchors a link may target in ``doc``: heading slugs (duplicates get _1, _2 ...) and HTML ids."""
    seen: set[str] = set()
    for h in doc.headings:
        slug = slugify(heading_plain_text(h.text))
        base, n = slug, 0
        while slug in seen:
            n += 1
            slug = f"{base}_{n}"
        seen.add(slug)
    return seen | set(doc.html_ids)
