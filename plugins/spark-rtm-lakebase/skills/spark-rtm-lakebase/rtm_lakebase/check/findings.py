"""The Finding record every check returns, and its text/JSON formatting."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class Finding:
    """One problem at ``path:line:col`` (path relative to the pack root, 1-based line/col)."""

    path: str
    line: int
    col: int
    code: str
    message: str

    def text(self) -> str:
        return f"{self.path}:{self.line}:{self.col} {self.code} {self.message}"

    def as_dict(self) -> dict:
        return asdict(self)


def shifted(finding: Finding, path: str, line_offset: int, col_offset: int = 0) -> Finding:
    """Move a finding found in an extracted snippet to its place in the file it came from."""
    return Finding(path, finding.line + line_offset, finding.col + col_offset, finding.code, finding.message)


def unique_sorted(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(set(findings))


def capped(findings: list[Finding], per_file: int) -> list[Finding]:
    """At most ``per_file`` findings per path (sorted input), then one PACK005 counting the rest."""
    out: list[Finding] = []
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.path] = counts.get(f.path, 0) + 1
        if counts[f.path] <= per_file:
            out.append(f)
    for path, n in counts.items():
        if n > per_file:
            out.append(Finding(path, 1, 1, "PACK005",
                               f"{n - per_file} more findings in this file not shown (limit {per_file} per file)"))
    return sorted(out)


def summary_line(findings: list[Finding], files_checked: int) -> str:
    if not findings:
        return f"OK: no findings ({files_checked} files checked)"
    paths = {f.path for f in findings}
    noun = "finding" if len(findings) == 1 else "findings"
    return f"FAILED: {len(findings)} {noun} in {len(paths)} file(s) ({files_checked} files checked)"


def render(findings: list[Finding], files_checked: int, fmt: str = "text") -> str:
    if fmt == "json":
        payload = {
            "findings": [f.as_dict() for f in findings],
            "summary": {"findings": len(findings), "files_checked": files_checked,
                        "ok": not findings, "text": summary_line(findings, files_checked)},
        }
        return json.dumps(payload, indent=2, ensure_ascii=False)
    lines = [f.text() for f in findings]
    lines.append(summary_line(findings, files_checked))
    return "\n".join(lines)
