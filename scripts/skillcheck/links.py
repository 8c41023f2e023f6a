"""Relative links and #anchors in Markdown resolve (http(s), mailto and other schemes are skipped)."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from rtm_lakebase.check.findings import Finding

from .anchors import anchors
from .markdown import Document

SCHEME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _exists(path: Path) -> bool:
    """Like ``Path.exists``, but a target no file system accepts (NUL, a name too long) simply does not exist."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def check_links(doc: Document, root: Path, load: Callable[[str], Document | None]) -> list[Finding]:
    """``load(relpath)`` returns the parsed Markdown document at a root-relative path (or None)."""
    out: list[Finding] = []
    own_anchors: set[str] | None = None
    for link in doc.links:
        target = link.target.strip()
        if not target or SCHEME_RE.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.split("?")[0])
        if not path_part:
            if own_anchors is None:
                own_anchors = anchors(doc, root)
            if anchor and anchor not in own_anchors:
                out.append(Finding(doc.path, link.line, link.col, "LINK002", f"anchor #{anchor} matches no heading in this file"))
            continue
        if path_part.startswith("/"):
            rel = posixpath.normpath(path_part.lstrip("/"))
        else:
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(doc.path), path_part))
        full = root / rel
        if rel.startswith("../") or not _exists(full):
            out.append(Finding(doc.path, link.line, link.col, "LINK001", f"link target {path_part!r} does not exist"))
            continue
        if anchor and rel.endswith(".md") and _exists(full):
            other = load(rel)
            if other is not None and anchor not in anchors(other, root):
                out.append(Finding(doc.path, link.line, link.col, "LINK002", f"anchor #{anchor} matches no heading in {rel}"))
    return out
