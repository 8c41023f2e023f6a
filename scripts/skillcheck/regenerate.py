"""Rewrite (or, with ``write=False``, only detect) every generated part of the pack's Markdown files."""

from __future__ import annotations

from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .excerpts import rewrite_excerpts
from .figures import Sources, rewrite_figures
from .generated import Renderer, rewrite
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
