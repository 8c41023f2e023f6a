"""Every module of the code folders (``packfiles.CODE_DIRS``) imports without side effects: no output, no threads, no SparkSession/JVM, no error.

All modules are imported in ONE fresh subprocess (the pack root on
``sys.path``), each with file descriptors 1 and 2 redirected to a temporary
file; the child writes a JSON report per module to a results file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .packfiles import CODE_DIRS
from .readfile import file_problem

TIMEOUT_SECONDS = 180

_CHILD = r'''
import importlib, json, os, sys, tempfile, threading, traceback
results_path, modules = sys.argv[1], sys.argv[2:]
results = {}
saved = (os.dup(1), os.dup(2))
def spark_started():
    if "pyspark" not in sys.modules:
        return False
    try:
        from pyspark import SparkContext
        return SparkContext._active_spark_context is not None or SparkContext._gateway is not None
    except Exception:
        return False
for name in modules:
    before = {t.ident for t in threading.enumerate()}
    spark_before = spark_started()
    with tempfile.TemporaryFile() as capture:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(capture.fileno(), 1); os.dup2(capture.fileno(), 2)
        error = None
        try:
            importlib.import_module(name)
        except BaseException as exc:  # report, do not crash the other imports
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        capture.seek(0)
        output = capture.read().decode("utf-8", "replace")
    threads = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    spark = spark_started() and not spark_before
    results[name] = {"output": output, "threads": threads, "spark": spark, "error": error}
with open(results_path, "w", encoding="utf-8") as fh:
    json.dump(results, fh)
try:  # a module that launched the JVM gateway must not leave it behind
    SparkContext = sys.modules["pyspark"].SparkContext
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:
        proc.kill()
        proc.wait(timeout=30)
except Exception:
    pass
os._exit(0)
'''


def module_names(root: Path) -> list[tuple[str, str]]:
    """(dotted module name, relative path) of every module in the code folders, packages first."""
    out = []
    for p in sorted(p for folder in CODE_DIRS if (root / folder).is_dir() for p in (root / folder).rglob("*.py")):
        if "__pycache__" in p.parts or file_problem(root, p.relative_to(root).as_posix()) is not None:
            continue  # unreadable files are reported by the validator, never imported
        rel = p.relative_to(root).as_posix()
        parts = list(p.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out.append((".".join(parts), rel))
    out.sort(key=lambda t: (t[0].count("."), t[0]))
    return out


def check_imports(root: Path, python: str = sys.executable) -> list[Finding]:
    mods = module_names(root)
    if not mods:
        return []
    paths = dict(mods)
    with tempfile.TemporaryDirectory(prefix="skills-import-") as tmp:
        results_path = os.path.join(tmp, "results.json")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP",)}
        env["PYTHONPATH"] = str(root)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            proc = subprocess.run([python, "-c", _CHILD, results_path, *paths], cwd=tmp, env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            return [Finding(paths[m], 1, 1, "IMP004", f"importing the examples did not finish in {TIMEOUT_SECONDS} s")
                    for m in paths]
        try:
            with open(results_path, encoding="utf-8") as fh:
                results = json.load(fh)
        except (OSError, json.JSONDecodeError):
            detail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return [Finding("examples", 1, 1, "IMP004", f"import check crashed (exit {proc.returncode}): {detail[0]}")]
    out: list[Finding] = []
    for name, rel in mods:
        r = results.get(name)
        if r is None:
            out.append(Finding(rel, 1, 1, "IMP004", "module was not imported (the check stopped early)"))
            continue
        if r["error"]:
            out.append(Finding(rel, 1, 1, "IMP004", f"import raises: {r['error'].splitlines()[-1]}"))
        if r["output"].strip():
            first = r["output"].strip().splitlines()[0][:120]
            out.append(Finding(rel, 1, 1, "IMP001", f"import prints output: {first!r}"))
        if r["threads"]:
            out.append(Finding(rel, 1, 1, "IMP002", f"import starts thread(s): {', '.join(r['threads'])}"))
        if r["spark"]:
            out.append(Finding(rel, 1, 1, "IMP003", "import starts a SparkContext / JVM gateway"))
    return out
