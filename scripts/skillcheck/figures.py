"""Figures in prose, rendered from the committed result JSON they quote.

A measured figure in a Markdown file carries an inline marker naming its
source, and the number right after the marker is what the marker renders::

    rows visible 16 ms (median) ...          <- a bare number: nothing checks it
    rows visible <!-- fig: rate_sweep.json#/points[path=rtm-fast-foreach,rate=1000]/visible/p50 -->16 ms

The comment is invisible on the rendered page (mkdocs) and markdownlint never
flags comments. ``skills.py generate`` rewrites every marked number from its
file; ``skills.py validate`` reports a number that differs from its file as
FIG001 and a marker that cannot be resolved as FIG002.

Marker grammar: ``<!-- fig: FILE#POINTER [FORMAT] -->NUMBER``

- ``FILE``: a JSON file relative to the pack root; a bare file name (no ``/``)
  means ``benchmarks/results/FILE``.
- ``POINTER``: a JSON Pointer (RFC 6901: ``/key/0/key``) whose list steps may
  also select an element by its fields, ``[path=rtm-jvm,rate=1000]`` (exactly
  one element must match; values compare as text).
- ``FORMAT`` (optional): ``/N`` or ``*N`` to scale, then an optional Python
  format spec after ``:`` (``/1000:.1f`` renders 1287 as ``1.3``). Without a
  spec, whole numbers get thousands separators (``2,459``) and other floats
  print as they are stored.
- ``NUMBER``: digits with optional ``,`` separators, ``.`` decimals and a
  leading ``-``; the unit stays outside (``16 ms``).

Markers inside code fences or code spans are examples, not figures.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rtm_lakebase.check.findings import Finding

RESULTS_DIR = "benchmarks/results"

#: The marker and the number it renders. ``fmt`` is optional; the number follows ``-->`` directly.
MARKER_RE = re.compile(
    r"<!--\s*fig:\s*(?P<file>[^#\s]+)#(?P<pointer>\S+)(?:\s+(?P<fmt>\S+))?\s*-->(?P<value>-?\d+(?:,\d{3})*(?:\.\d+)?)?")
_CODE_SPAN_RE = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
_STEP_SELECT_RE = re.compile(r"^(?P<key>[^\[]*)\[(?P<select>[^\]]+)\]$")
_FMT_RE = re.compile(r"^(?:(?P<op>[/*])(?P<factor>\d+(?:\.\d+)?))?(?::(?P<spec>.+))?$")


class FigureError(ValueError):
    """A marker that cannot be rendered: the message says why (file, pointer or format)."""


@dataclass(frozen=True)
class Figure:
    """One marker in a document; ``line``/``col`` are 1-based, ``value`` is the number after it (or None)."""

    line: int
    col: int
    file: str
    pointer: str
    fmt: str | None
    value: str | None
    value_start: int  # offset of the number in the line (or of the end of the marker when there is none)
    value_end: int


def source_path(file: str) -> str:
    return file if "/" in file else f"{RESULTS_DIR}/{file}"


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def resolve(data, pointer: str):
    """The value at ``pointer`` (JSON Pointer plus ``[field=value,...]`` selectors on list steps)."""
    if pointer == "":
        return data
    if not pointer.startswith("/"):
        raise FigureError(f"pointer {pointer!r} must start with '/'")
    node = data
    for raw in pointer[1:].split("/"):
        m = _STEP_SELECT_RE.match(raw)
        key, select = (m.group("key"), m.group("select")) if m else (raw, None)
        key = _unescape(key)
        if key:
            node = _step(node, key, pointer)
        if select is not None:
            node = _select(node, select, pointer)
    return node


def _step(node, key: str, pointer: str):
    if isinstance(node, dict):
        if key not in node:
            raise FigureError(f"pointer {pointer!r}: no key {key!r} (keys: {', '.join(sorted(map(str, node)))[:200]})")
        return node[key]
    if isinstance(node, list):
        if not key.isdigit() or int(key) >= len(node):
            raise FigureError(f"pointer {pointer!r}: {key!r} is not an index of a list of {len(node)}")
        return node[int(key)]
    raise FigureError(f"pointer {pointer!r}: cannot step into a {type(node).__name__} with {key!r}")


def _select(node, select: str, pointer: str):
    if not isinstance(node, list):
        raise FigureError(f"pointer {pointer!r}: [{select}] selects from a list, found {type(node).__name__}")
    wanted = []
    for part in select.split(","):
        field, eq, value = part.partition("=")
        if not eq or not field.strip():
            raise FigureError(f"pointer {pointer!r}: selector {part!r} is not field=value")
        wanted.append((field.strip(), value.strip()))
    hits = [el for el in node if isinstance(el, dict)
            and all(f in el and _as_text(el[f]) == v for f, v in wanted)]
    if len(hits) != 1:
        raise FigureError(f"pointer {pointer!r}: [{select}] matches {len(hits)} elements, not exactly one")
    return hits[0]


def _as_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render(value, fmt: str | None) -> str:
    """The text a marker shows for ``value`` under ``fmt`` (see the module docstring)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FigureError(f"the pointer names a {type(value).__name__}, not a number")
    m = _FMT_RE.match(fmt or "")
    if not m:
        raise FigureError(f"format {fmt!r} is not [/N|*N][:spec]")
    if m.group("op"):
        factor = float(m.group("factor"))
        if factor == 0:
            raise FigureError("format divides by zero")
        value = value / factor if m.group("op") == "/" else value * factor
    spec = m.group("spec")
    if spec is not None:
        try:
            return format(value, spec)
        except (ValueError, TypeError) as exc:
            raise FigureError(f"format spec {spec!r}: {exc}") from None
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return repr(float(value))


def find_figures(lines: list[str], skip: Callable[[int], bool] = lambda n: False) -> list[Figure]:
    out = []
    for lineno, text in enumerate(lines, 1):
        if "fig:" not in text or skip(lineno):
            continue
        # A marker inside a code span is an example of the syntax, not a figure: blank the spans out
        # (same length, so offsets still point into ``text``).
        masked = _CODE_SPAN_RE.sub(lambda m: " " * len(m.group(0)), text)
        for m in MARKER_RE.finditer(masked):
            start, end = (m.start("value"), m.end("value")) if m.group("value") else (m.end(), m.end())
            out.append(Figure(lineno, m.start() + 1, m.group("file"), m.group("pointer"), m.group("fmt"),
                              m.group("value"), start, end))
    return out


class Sources:
    """Loads each JSON source once per run; a load problem is remembered as its message."""

    def __init__(self, root: Path):
        self.root = root
        self._cache: dict[str, tuple[object, str | None]] = {}

    def load(self, file: str):
        rel = source_path(file)
        if rel not in self._cache:
            self._cache[rel] = self._load(rel)
        data, problem = self._cache[rel]
        if problem:
            raise FigureError(problem)
        return data

    def _load(self, rel: str) -> tuple[object, str | None]:
        path = self.root / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            return None, f"source {rel} leaves the pack"
        if not path.is_file():
            return None, f"source {rel} not found"
        try:
            return json.loads(path.read_text(encoding="utf-8")), None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return None, f"source {rel} is not readable JSON: {type(exc).__name__}"

    def text(self, fig: Figure) -> str:
        return render(resolve(self.load(fig.file), fig.pointer), fig.fmt)


def check_figures(path: str, lines: list[str], sources: Sources,
                  skip: Callable[[int], bool] = lambda n: False) -> list[Finding]:
    """FIG001 (the number differs from its file) and FIG002 (the marker cannot be rendered) of one document."""
    out = []
    for fig in find_figures(lines, skip):
        where = f"{source_path(fig.file)}#{fig.pointer}"
        try:
            want = sources.text(fig)
        except FigureError as exc:
            out.append(Finding(path, fig.line, fig.col, "FIG002", f"figure marker {where}: {exc}"))
            continue
        if fig.value is None:
            out.append(Finding(path, fig.line, fig.col, "FIG002",
                               f"figure marker {where} is not followed by a number (its file says {want})"))
        elif fig.value != want:
            out.append(Finding(path, fig.line, fig.col, "FIG001",
                               f"figure {fig.value} differs from {where}, which renders {want}; "
                               f"run `python scripts/skills.py generate`"))
    return out


def rewrite_figures(text: str, sources: Sources, skip: Callable[[int], bool] = lambda n: False
                    ) -> tuple[str, list[Finding]]:
    """``text`` with every marked number re-rendered from its file; markers that fail are left as they are."""
    lines = text.split("\n")
    problems: list[Finding] = []
    by_line: dict[int, list[Figure]] = {}
    for fig in find_figures(lines, skip):
        by_line.setdefault(fig.line, []).append(fig)
    for lineno, figs in by_line.items():
        line = lines[lineno - 1]
        for fig in sorted(figs, key=lambda f: f.value_start, reverse=True):
            try:
                want = sources.text(fig)
            except FigureError as exc:
                problems.append(Finding("", fig.line, fig.col, "FIG002", str(exc)))
                continue
            line = line[:fig.value_start] + want + line[fig.value_end:]
        lines[lineno - 1] = line
    return "\n".join(lines), problems
