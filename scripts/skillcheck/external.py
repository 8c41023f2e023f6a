"""External checkers: markdownlint (repo config ``.markdownlint.yaml``) and ``mkdocs build --strict``.

Note: ``mkdocs build --strict -q`` (mkdocs 1.6.1) hides the warnings and then
does NOT fail on them, so the build runs without ``-q``.

A missing tool is a finding (EXT003) naming the tool and how to install it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .readfile import file_problem

TIMEOUT_SECONDS = 300


def markdownlint_command(root: Path) -> list[str] | None:
    local = root / "node_modules" / ".bin" / "markdownlint"
    if local.exists():
        return [str(local)]
    found = shutil.which("markdownlint")
    return [found] if found else None


def run_markdownlint(root: Path, files: list[str]) -> list[Finding]:
    if not files:
        return []
    cmd = markdownlint_command(root)
    if cmd is None or shutil.which("node") is None:
        what = "node" if shutil.which("node") is None else "markdownlint"
        return [Finding(".markdownlint.yaml", 1, 1, "EXT003",
                        f"{what} not found: install Node 20+ and run `npm ci` in the pack root (or `bash scripts/setup.sh`)")]
    config = root / ".markdownlint.yaml"
    if os.path.lexists(config) and (problem := file_problem(root, ".markdownlint.yaml")):
        return [problem]
    args = cmd + ["--json"] + (["--config", str(config)] if config.exists() else []) + ["--"] + files
    try:
        proc = subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Finding(".markdownlint.yaml", 1, 1, "EXT003", f"markdownlint could not run: {exc}")]
    if proc.returncode == 0:
        return []
    try:
        issues = json.loads(proc.stderr or proc.stdout)
    except json.JSONDecodeError:
        detail = (proc.stderr or proc.stdout).strip().splitlines()[:1] or [f"exit {proc.returncode}"]
        return [Finding(".markdownlint.yaml", 1, 1, "EXT001", f"markdownlint failed: {detail[0]}")]
    out = []
    for i in issues:
        rng = i.get("errorRange") or [1]
        names = "/".join(i.get("ruleNames", []))
        detail = f" [{i['errorDetail']}]" if i.get("errorDetail") else ""
        out.append(Finding(i.get("fileName", "?"), int(i.get("lineNumber") or 1), int(rng[0] or 1), "EXT001",
                           f"{names} {i.get('ruleDescription', '')}{detail}"))
    return out


_MKDOCS_FILE_RE = re.compile(r"'([^']+\.md)'")


def run_mkdocs(root: Path) -> list[Finding]:
    config = root / "mkdocs.yml"
    if not os.path.lexists(config):
        return [Finding("mkdocs.yml", 1, 1, "EXT002", "mkdocs.yml not found: the docs site cannot be built")]
    if problem := file_problem(root, "mkdocs.yml"):
        return [problem]
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        return [Finding("mkdocs.yml", 1, 1, "EXT003",
                        "mkdocs not installed: `pip install mkdocs-material 'mkdocs<2'` (or `bash scripts/setup.sh`)")]
    with tempfile.TemporaryDirectory(prefix="skills-site-") as site:
        env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
        try:
            proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", site],
                                  cwd=root, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=env)
        except subprocess.TimeoutExpired:
            return [Finding("mkdocs.yml", 1, 1, "EXT002", f"mkdocs build did not finish in {TIMEOUT_SECONDS} s")]
    if proc.returncode == 0:
        return []
    return parse_mkdocs_output(root, config, proc.stderr + proc.stdout) or [
        Finding("mkdocs.yml", 1, 1, "EXT002",
                f"mkdocs build --strict failed: {((proc.stderr or proc.stdout).strip().splitlines() or [f'exit {proc.returncode}'])[-1]}")]


_DOC_LINK_RE = re.compile(r"Doc file '([^']+)' contains (?:a|an unrecognized) (?:relative )?link '([^']+)'")


def _locate(root: Path, docs_dir: str, doc: str) -> str | None:
    for candidate in (f"{docs_dir}/{doc}", doc):
        if (root / candidate).is_file():
            return candidate
    return None


def _line_of(root: Path, rel: str, needle: str) -> int:
    try:
        for i, line in enumerate((root / rel).read_text(encoding="utf-8").splitlines(), 1):
            if needle in line:
                return i
    except (OSError, UnicodeDecodeError):
        pass
    return 1


def parse_mkdocs_output(root: Path, config: Path, output: str) -> list[Finding]:
    """WARNING/ERROR lines (with their indented continuation lines) as findings, placed on a file where possible."""
    docs_dir = _docs_dir(config)
    messages: list[str] = []
    for line in output.splitlines():
        if re.match(r"^\s*(WARNING|ERROR)\b", line):
            messages.append(re.sub(r"\s+", " ", line.strip()))
        elif messages and re.match(r"^\s+-\s+\S", line):
            messages[-1] += " " + line.strip()
    out = []
    for msg in messages:
        path, lineno = "mkdocs.yml", 1
        m = _DOC_LINK_RE.search(msg)
        if m:
            found = _locate(root, docs_dir, m.group(1))
            if found:
                path, lineno = found, _line_of(root, found, f"]({m.group(2)}")
        elif "'nav' configuration" in msg or "not included in the \"nav\"" in msg:
            path, lineno = "mkdocs.yml", 1
        else:
            q = _MKDOCS_FILE_RE.search(msg)
            found = _locate(root, docs_dir, q.group(1)) if q else None
            if found:
                path = found
        out.append(Finding(path, lineno, 1, "EXT002", msg))
    return out


def _docs_dir(config: Path) -> str:
    for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"^docs_dir:\s*['\"]?([^'\"#\s]+)", line)
        if m:
            return m.group(1).rstrip("/")
    return "docs"
