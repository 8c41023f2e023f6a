"""Check a user's own files and folders: ``.py``, ``.ipynb`` and ``.md``, with the real-time, sink, SQL and prose rules.

- ``.py``: one module (:mod:`rtm_lakebase.check.python`); Databricks notebook
  exports are one module too, their ``# MAGIC %md`` cells prose;
- ``.ipynb``: :mod:`rtm_lakebase.check.notebook`;
- ``.md``: fenced blocks and prose (:mod:`rtm_lakebase.check.markdown`).

A folder is walked (tool, build and hidden folders skipped). Unreadable,
binary, oversized or non-regular files become coded findings (PACK002,
PACK003, PACK004), never a traceback; a path that cannot be checked at all
raises :class:`UsageProblem` (one line, exit 2 from the command line).
"""

from __future__ import annotations

import os
from pathlib import Path

from rtm_lakebase.check.codes import CODES
from rtm_lakebase.check.findings import Finding, capped, unique_sorted
from rtm_lakebase.check.limits import MAX_FILES, MAX_FINDINGS_PER_FILE
from rtm_lakebase.check.markdown import check_markdown_file
from rtm_lakebase.check.notebook import check_notebook
from rtm_lakebase.check.python import check_python_file
from rtm_lakebase.check.reading import read_pack_bytes

EXTENSIONS = (".py", ".ipynb", ".md")
#: Folders never descended into when a directory is given.
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages",
             ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache", ".tox", "build", "dist", "site"}


class UsageProblem(Exception):
    """A path given on the command line cannot be checked (exit 2, one line)."""


def check_file(root: Path, rel: str, shown: str) -> list[Finding]:
    """Findings for one file (``root/rel``), reported under the path ``shown``."""
    raw, problem = read_pack_bytes(root, rel)
    if problem:
        return [Finding(shown, problem.line, problem.col, problem.code,
                        problem.message.replace("the pack", "the folder checked"))]
    if shown.endswith(".ipynb"):
        return check_notebook(shown, raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        return [Finding(shown, line, 1, "PACK002", f"not valid UTF-8 (byte {exc.start}): {exc.reason}")]
    if shown.endswith(".md"):
        return check_markdown_file(shown, text)
    return check_python_file(shown, text)


def _walk(folder: Path) -> list[str]:
    """Files to check under ``folder`` (relative paths, sorted); symlinked folders are not followed."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=lambda _e: None):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(EXTENSIONS):
                found.append(os.path.relpath(os.path.join(dirpath, name), folder))
                if len(found) > MAX_FILES:
                    raise UsageProblem(f"{folder} holds more than {MAX_FILES:,} .py/.ipynb/.md files; "
                                       "name the folders to check")
    return sorted(found)


def _display(base: str, rel: str | None = None) -> str:
    p = os.path.join(base, rel) if rel else base
    return os.path.normpath(p).replace(os.sep, "/")


def check_paths(paths: list[str]) -> tuple[list[Finding], int]:
    """(findings, files checked) for files and folders; a path that cannot be checked raises UsageProblem."""
    jobs: list[tuple[Path, str, str]] = []
    for given in paths:
        p = Path(given)
        if not os.path.lexists(p):
            raise UsageProblem(f"{given}: no such file or directory")
        if p.is_dir():
            if not os.access(p, os.R_OK | os.X_OK):
                raise UsageProblem(f"{given}: folder cannot be read (permission denied)")
            jobs += [(p, rel, _display(given, rel)) for rel in _walk(p)]
        else:
            if p.is_file() and not os.access(p, os.R_OK):
                raise UsageProblem(f"{given}: file cannot be read (permission denied)")
            if p.is_file() and not given.endswith(EXTENSIONS):
                raise UsageProblem(f"{given}: not a .py, .ipynb or .md file")
            real = p.resolve() if p.is_symlink() else p  # a file named explicitly may be a symlink
            jobs.append((real.parent, real.name, _display(given)))
    out: list[Finding] = []
    for root, rel, shown in jobs:
        try:
            out += check_file(root, rel, shown)
        except (RecursionError, MemoryError) as exc:
            out.append(Finding(shown, 1, 1, "PY002", f"too deeply nested to check ({type(exc).__name__})"))
    return capped(unique_sorted(out), MAX_FINDINGS_PER_FILE), len(jobs)


def with_fixes(findings: list[Finding]) -> list[dict]:
    """Findings as dicts with the code's fix (``--format json``)."""
    return [dict(f.as_dict(), fix=CODES[f.code].fix if f.code in CODES else "") for f in findings]
