"""Python source: the continuation, syntax and pattern rules, and Databricks notebook exports.

:func:`check_python_source` is the one entry point for Python, used for a
user's ``.py`` file, a notebook's joined code cells, a fenced block in
Markdown, and by the pack's validator for its own snippets and modules.
A Databricks ``.py`` export (``# COMMAND ----------`` cells) is one module, so
a query built in one cell and started in another is one chain; its
``# MAGIC %md`` cells get the prose rules.
"""

from __future__ import annotations

import ast
import re

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.optouts import module_optouts
from rtm_lakebase.check.rules import python_rules, text_rules
from rtm_lakebase.check.rules.prose import check_text

PYTHON_LANGS = {"python", "py", "python3"}
DBX_MAGIC_RE = re.compile(r"^# MAGIC ?(.*)$")
DBX_CELL_RE = re.compile(r"^# COMMAND -{5,}\s*$")


def check_python_source(source: str, path: str, line_offset: int = 0,
                        col_offset: int = 0) -> tuple[list[Finding], ast.Module | None]:
    """Continuation, syntax and pattern rules on Python source; lines shifted by the offsets."""
    out = text_rules(source, path)
    tree = None
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        out.append(Finding(path, exc.lineno or 1, exc.offset or 1, "PY001", f"does not parse: {exc.msg}"))
    except ValueError as exc:  # e.g. null bytes
        out.append(Finding(path, 1, 1, "PY001", f"does not parse: {exc}"))
    except (RecursionError, MemoryError) as exc:
        out.append(Finding(path, 1, 1, "PY002", f"too deeply nested for the Python parser ({type(exc).__name__})"))
    if tree is not None:
        try:
            out += python_rules(tree, path)
        except (RecursionError, MemoryError) as exc:
            out.append(Finding(path, 1, 1, "PY002", f"too deeply nested to check the rules ({type(exc).__name__})"))
            tree = None
    shifted = [Finding(f.path, f.line + line_offset, f.col + col_offset, f.code, f.message) for f in set(out)]
    return shifted, tree


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
    """A user's module (or a notebook's joined code): rules, ``# MAGIC %md`` prose, ``# skills: allow`` opt-outs."""
    findings, _ = check_python_source(source, path)
    for para in _dbx_markdown_cells(source.splitlines()):
        findings += check_text(para, path)
    return module_optouts(source, path, findings)
