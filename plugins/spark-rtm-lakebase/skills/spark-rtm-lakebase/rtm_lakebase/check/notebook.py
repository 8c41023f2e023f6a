"""Jupyter notebooks: code cells joined into one module, markdown cells checked as Markdown.

IPython magics and shell lines are blanked (as comments) so line numbers
stay. A finding's path is ``NOTEBOOK.ipynb#cell-N`` and its line is the line
inside that cell. A file that is not a readable notebook is one PACK002
finding.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.limits import MAX_NESTING
from rtm_lakebase.check.markdown import check_markdown_file
from rtm_lakebase.check.python import check_python_file
from rtm_lakebase.check.reading import nesting_depth

MAGIC_LINE_RE = re.compile(r"^\s*[%!]")


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
