"""Rewrite (or, with ``write=False``, only detect) every generated part of the pack's Markdown files."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .excerpts import rewrite_excerpts
from .figures import Sources, rewrite_figures
from .generated import GENERATORS, Renderer, rewrite
from .markdown import parse
from .packfiles import markdown_files
from .readfile import file_problem, read_pack_text, write_atomically


def regenerate_markdown(root: Path, write: bool = True, names=None) -> tuple[list[str], list[Finding]]:
    """(files whose generated parts changed, problems such as a generator that failed)."""
    renderer = Renderer(root)
    sources = Sources(root)
    changed: list[str] = []
    problems: list[Finding] = []

    def read_module(rel: str) -> str | None:
        try:
            if file_problem(root, rel) is not None:
                return None
        except ValueError:  # NUL in the name
            return None
        return read_pack_text(root, rel)[0]

    for rel in markdown_files(root):
        text, err = read_pack_text(root, rel)
        if text is None:
            continue
        new = text
        if names is None and "excerpt:" in text:
            doc = parse(rel, text)
            lines, n = rewrite_excerpts(doc.lines, doc.blocks, read_module)
            if n:
                new = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
        if "generated:" in new:
            doc = parse(rel, new)
            new, found = rewrite(new, renderer, names, doc.in_code)
            problems += [Finding(rel, f.line, f.col, f.code, f.message) for f in found]
        if names is None and "fig:" in new:
            doc = parse(rel, new)
            new, found = rewrite_figures(new, sources, doc.in_code)
            problems += [Finding(rel, f.line, f.col, f.code, f.message) for f in found]
        if new != text:
            changed.append(rel)
            if write:
                write_atomically(root / rel, new.encode("utf-8"))
    return changed, problems


def write_blocks(root: Path, names: Iterable[str] | None = None) -> tuple[list[str], list[Finding]]:
    """Rewrite the blocks (all, or those of ``names``) in the pack's Markdown files; (changed files, problems)."""
    names = list(names) if names is not None else None
    for name in names or ():
        if name not in GENERATORS:
            raise KeyError(f"unknown generator {name!r}")
    return regenerate_markdown(Path(root).resolve(), write=True, names=names)


def write_from_script(name: str) -> list[str]:
    """For a script that produces a generator's JSON: rewrite that generator's blocks in this checkout.

    Raises ``RuntimeError`` naming the problem when a block cannot be written.
    """
    root = Path(__file__).resolve().parents[2]
    changed, problems = write_blocks(root, [name])
    if problems:
        raise RuntimeError("; ".join(f.text() for f in problems))
    return changed
