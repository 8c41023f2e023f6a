"""Reference excerpts: a fence after ``<!-- excerpt: MODULE.py#NAME -->`` equals the module's marked region.

The region is the lines between ``# --8<-- [start:NAME]`` and
``# --8<-- [end:NAME]``, dedented. ``validate`` reports a block that differs
(EXC003); ``generate`` rewrites it (:func:`rewrite_excerpts`), keeping the
fence and its indentation. This is the second kind of generated block beside
:mod:`skillcheck.generated`, under the same write/check pair.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable

EXCERPT_RE = re.compile(r"^excerpt:\s*(?P<path>[^#\s]+)#(?P<name>[\w.-]+)\s*$")
MARKER_RE = re.compile(r"^\s*#\s*--8<--\s*\[(?P<kind>start|end):(?P<name>[\w.-]+)\]\s*$")


def region(source: str, name: str) -> tuple[list[str] | None, str]:
    """(dedented lines of region ``name``, '') or (None, what is wrong with its markers)."""
    found: list[str] | None = None
    starts = ends = 0
    begin = 0
    lines = source.splitlines()
    for i, text in enumerate(lines):
        if "--8<--" not in text:
            continue
        m = MARKER_RE.match(text)
        if m and m.group("name") == name:
            if m.group("kind") == "start":
                starts += 1
                begin = i + 1
            else:
                ends += 1
                if starts == 1 and found is None:
                    found = lines[begin:i]
    if starts != 1 or ends != 1 or found is None:
        return None, f"needs exactly one start and one end marker (found {starts} start, {ends} end)"
    return [line.rstrip() for line in textwrap.dedent("\n".join(found)).splitlines()], ""


def excerpt_target(comment: str) -> tuple[str, str] | None:
    m = EXCERPT_RE.match(comment)
    return (m.group("path"), m.group("name")) if m else None


def rewrite_excerpts(lines: list[str], blocks, read_module: Callable[[str], str | None]) -> tuple[list[str], int]:
    """``lines`` with each closed excerpt block's body replaced by its region; (new lines, blocks changed).

    ``blocks`` are the document's fenced blocks (``start``/``end`` fence lines, ``indent``, ``comments``,
    ``closed``, ``lines``). Blocks whose module or region is missing are left alone (validate reports them).
    """
    out = list(lines)
    changed = 0
    for block in sorted(blocks, key=lambda b: b.start, reverse=True):
        if not block.closed:
            continue
        for _, comment in block.comments:
            target = excerpt_target(comment)
            if target is None:
                continue
            source = read_module(target[0])
            wanted = region(source, target[1])[0] if source is not None else None
            if wanted is None or [l.rstrip() for l in block.lines] == wanted:
                continue
            pad = " " * block.indent
            out[block.start:block.end - 1] = [pad + l if l else "" for l in wanted]
            changed += 1
            break
    return out, changed
