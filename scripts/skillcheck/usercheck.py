"""Check a user's own files (``skills.py check PATH...``) with the validator's code and prose rules.

What runs: the Python rules of :mod:`skillcheck.rules` (real-time query
shape, sink, SQL, continuation) and the prose rules, through the same entry
points ``validate`` uses (:func:`codeblocks.check_python_source`,
:func:`codeblocks.check_document`). What does not: anything about the pack
itself (manifest, front matter, routing, links, excerpts, docstrings).

- ``.py``: one module; Databricks notebook exports (``# COMMAND ----------``
  cells) are one module too, so a query built in one cell and started in
  another is one chain. ``# MAGIC %md`` cells get the prose rules.
- ``.ipynb``: the code cells are joined into one module (IPython magics and
  shell lines blanked, line numbers kept), markdown cells get the prose
  rules. A finding's path is ``NOTEBOOK.ipynb#cell-N`` and its line is the
  line inside that cell.
- ``.md``: fenced python blocks and prose, as in a reference.

Opt-outs work as in the pack: ``# skills: allow CODE -- reason``.
Unreadable, binary, oversized or non-regular files become coded findings
(PACK002/PACK003/PACK004, PY001/PY002), never a traceback.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .codeblocks import PY_OPTOUT_RE, apply_optouts, check_document, check_python_source, parse_optouts, stale
from .findings import Finding, capped, unique_sorted
from .limits import MAX_FINDINGS_PER_FILE, MAX_NESTING
from .readfile import nesting_depth, read_pack_bytes
from .rules.prose import check_text

EXTENSIONS = (".py", ".ipynb", ".md")
#: Folders never descended into when a directory is given.
SKIP_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", "site-packages",
             ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache", ".tox", "build", "dist", "site"}
#: Codes that speak about the user's code; pack-only codes (manifest, front matter, excerpts, ...) are dropped.
USER_PREFIXES = ("RTM", "LBS", "SINK", "SQL", "CONT", "PROSE", "PY", "OPT", "PACK002", "PACK003", "PACK004", "PACK005")
MAX_FILES = 5_000

MAGIC_LINE_RE = re.compile(r"^\s*[%!]")
DBX_MAGIC_RE = re.compile(r"^# MAGIC ?(.*)$")
DBX_CELL_RE = re.compile(r"^# COMMAND -{5,}\s*$")


class UsageProblem(Exception):
    """A path given on the command line cannot be checked (exit 2, one line)."""


def _user_codes(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code.startswith(USER_PREFIXES)]


def _module_optouts(source: str, path: str, findings: list[Finding], line_of=None) -> list[Finding]:
    """Apply ``# skills: allow CODE -- reason`` comments (on the finding's line or the line above)."""
    optouts, out = {}, []
    for i, text in enumerate(source.splitlines(), 1):
        m = PY_OPTOUT_RE.search(text)
        if m:
            body = "skills: allow " + m.group("codes") + (" -- " + m.group("reason") if m.group("reason") else "")
            opts, found = parse_optouts([(i, body)], path)
            out += found
            optouts[i] = opts[0]
    for f in findings:
        cands = [optouts[l] for l in (f.line, f.line - 1) if l in optouts]
        out += apply_optouts([f], cands)
    out += stale(list(optouts.values()), path)
    return out


def _dbx_markdown_cells(lines: list[str]) -> list[list[tuple[int, int, str]]]:
    """Prose segments of ``# MAGIC %md`` cells in a Databricks .py export: (line, col, text) per paragraph."""
    paragraphs: list[list[tuple[int, int, str]]] = []
    in_md, current = False, []
    for i, line in enumerate(lines, 1):
        if DBX_CELL_RE.match(line):
            in_md = False
        m = DBX_MAGIC_RE.match(line)
        if not m:
            if current:
                paragraphs.append(current)
                current = []
            continue
        body = m.group(1)
        if body.lstrip().startswith("%"):
            in_md = body.lstrip().startswith("%md")
            body = body.lstrip()[3:] if in_md else ""
        if not in_md:
            continue
        col = len(line) - len(m.group(1))
        if body.strip():
            current.append((i, col, body))
        elif current:
            paragraphs.append(current)
            current = []
    if current:
        paragraphs.append(current)
    return paragraphs


def check_python_file(path: str, source: str) -> list[Finding]:
    findings, _ = check_python_source(source, path)
    lines = source.splitlines()
    for para in _dbx_markdown_cells(lines):
        findings += check_text(para, path)
    return _module_optouts(source, path, _user_codes(findings))


def check_markdown_file(path: str, source: str) -> list[Finding]:
    from .markdown import parse

    return _user_codes(check_document(parse(path, source), lambda _rel: None))


@dataclass
class _Cell:
    index: int  # 1-based cell number in the notebook
    kind: str
    first_line: int  # line of the cell's first line in the joined module
    lines: list[str]


def _cell_source(cell: object) -> str | None:
    if not isinstance(cell, dict):
        return None
    src = cell.get("source", "")
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    return src if isinstance(src, str) else None


def check_notebook(path: str, raw: bytes) -> list[Finding]:
    try:
        nb = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return [Finding(path, 1, 1, "PACK002", f"notebook is not UTF-8: {exc.reason}")]
    except json.JSONDecodeError as exc:
        return [Finding(path, exc.lineno, exc.colno, "PACK002", f"notebook is not valid JSON: {exc.msg}")]
    except (RecursionError, MemoryError, ValueError) as exc:
        return [Finding(path, 1, 1, "PACK002", f"notebook JSON nested too deeply to read ({type(exc).__name__})")]
    if nesting_depth(nb, MAX_NESTING) > MAX_NESTING:
        return [Finding(path, 1, 1, "PACK002", f"notebook JSON nested deeper than {MAX_NESTING} levels")]
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return [Finding(path, 1, 1, "PACK002", "not a Jupyter notebook: no top-level \"cells\" list")]
    cells: list[_Cell] = []
    code_lines: list[str] = []
    out: list[Finding] = []
    for k, cell in enumerate(nb["cells"], 1):
        src = _cell_source(cell)
        if src is None:
            out.append(Finding(f"{path}#cell-{k}", 1, 1, "PACK002", "notebook cell has no readable \"source\""))
            continue
        kind = cell.get("cell_type")
        lines = src.splitlines()
        if kind == "code":
            cells.append(_Cell(k, kind, len(code_lines) + 1, lines))
            # Magics and shell escapes are not Python: blanked (as a comment) so line numbers stay.
            code_lines += ["# " + l if MAGIC_LINE_RE.match(l) else l for l in lines]
        elif kind == "markdown":
            out += [Finding(f"{path}#cell-{k}", f.line, f.col, f.code, f.message)
                    for f in check_markdown_file(f"{path}#cell-{k}", src)]
    source = "\n".join(code_lines) + "\n"
    found = check_python_file(path, source)

    def place(f: Finding) -> Finding:
        for cell in reversed(cells):
            if f.line >= cell.first_line:
                return Finding(f"{path}#cell-{cell.index}", f.line - cell.first_line + 1, f.col, f.code, f.message)
        return f

    return out + [place(f) for f in found]


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
    from .codes import CODES

    return [dict(f.as_dict(), fix=CODES[f.code].fix if f.code in CODES else "") for f in findings]
