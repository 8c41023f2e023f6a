"""One cached virtual environment per PySpark release line, for running the support matrix on each.

The pack is pinned to PySpark 4.3.0, but its users run older releases too. To
say per version which real-time pattern works, ``tests/test_support_matrix_versions.py``
runs the whole support matrix (``pack_lab/support_matrix.py``) inside a virtual
environment per release listed in :data:`OTHER_VERSIONS`. Each one lives in
``.cache/pyspark-<version>/`` (git-ignored), is created on first use and reused
afterwards::

    python = ensure_venv("4.2.1")            # builds .cache/pyspark-4.2.1 once
    results = run_matrix("4.2.1", out_json)  # runs every row in that venv

A half-built environment never counts as ready: it is built under a temporary
name and renamed only after every package installed, and a failed build is
removed. 4.3.0 itself runs in the pack's own ``.venv`` (the main test suite).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"

#: The pack's pinned release: its column comes from the main test suite.
PINNED_VERSION = "4.3.0"
#: Latest release of each older line that has real-time mode (checked with
#: ``pip index versions pyspark`` on 2026-11-23: 4.1.4 and 4.2.1).
OTHER_VERSIONS = ("4.1.4", "4.2.1")
#: Every column of the rendered matrix, oldest first.
ALL_VERSIONS = OTHER_VERSIONS + (PINNED_VERSION,)

#: What the matrix rows need next to pyspark (pandas/pyarrow for the pandas-UDF and
#: transformWithStateInPandas rows, protobuf for PySpark's transformWithState worker), and
#: psycopg for the Python Postgres writer of the Kafka → Postgres run
#: (``pack_lab/kafka_version_check.py``). Same pins as the pack's dev extra.
COMPANIONS = ("pandas==2.3.3", "pyarrow==26.0.1", "protobuf==7.36.2", "psycopg[binary]==3.3.9")

_READY = ".ready"


class VersionEnvError(RuntimeError):
    """A per-version environment could not be built or the matrix could not run in it."""


def _say(message: str) -> None:
    print(f"[spark-versions] {message}", file=sys.stderr, flush=True)


def venv_dir(version: str, cache: Path = CACHE) -> Path:
    return cache / f"pyspark-{version}"


def venv_python(version: str, cache: Path = CACHE) -> Path:
    return venv_dir(version, cache) / "bin" / "python"


def requirements(version: str) -> list[str]:
    return [f"pyspark=={version}", *COMPANIONS]


def _stamp(version: str) -> str:
    return json.dumps({"python": sys.version.split()[0], "requirements": requirements(version)})


def is_ready(version: str, cache: Path = CACHE) -> bool:
    """True when the cached venv was fully built for exactly these requirements."""
    marker = venv_dir(version, cache) / _READY
    return marker.is_file() and marker.read_text(encoding="utf-8") == _stamp(version) \
        and venv_python(version, cache).exists()


def ensure_venv(version: str, cache: Path = CACHE, base_python: str = sys.executable,
                run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> Path:
    """Return the venv's interpreter, building ``.cache/pyspark-<version>`` first if needed."""
    if is_ready(version, cache):
        return venv_python(version, cache)
    target = venv_dir(version, cache)
    building = target.with_name(target.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    _say(f"creating {target.relative_to(cache.parent)} (first run downloads pyspark {version}, ~450 MB)")
    started = time.monotonic()
    try:
        _checked(run, [base_python, "-m", "venv", str(building)], "python -m venv")
        pip = [str(building / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
        _checked(run, pip + ["install", *requirements(version)], f"pip install pyspark=={version}")
        (building / _READY).write_text(_stamp(version), encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        building.rename(target)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    _say(f"pyspark {version} ready in {time.monotonic() - started:.0f} s")
    return venv_python(version, cache)


def _checked(run: Callable[..., subprocess.CompletedProcess], cmd: Sequence[str], what: str) -> None:
    result = run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout or "").strip().splitlines()[-5:])
        raise VersionEnvError(f"{what} failed (exit {result.returncode}): {tail}")


def run_in_venv(version: str, args: Sequence[str], what: str, cache: Path = CACHE,
                timeout: float = 900.0) -> str:
    """Run ``python ARGS`` with PySpark ``version``'s cached venv; return its standard output.

    The child's interpreter is the venv's (for the driver and the Python workers),
    with the repository on ``PYTHONPATH`` so the pack's lab imports; its standard
    error (progress, Spark's log) goes to ours. ``what`` names the run in errors.
    """
    python = ensure_venv(version, cache)
    env = dict(os.environ)
    env.update({
        "PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    })
    env.pop("SPARK_HOME", None)  # the venv's own pyspark, never another install's jars
    try:
        result = subprocess.run([str(python), *args], cwd=str(ROOT), env=env, timeout=timeout,
                                stdout=subprocess.PIPE, stderr=None, text=True)
    except subprocess.TimeoutExpired as exc:
        raise VersionEnvError(f"{what} under pyspark {version} did not finish in {timeout:.0f} s") from exc
    if result.returncode != 0:
        tail = "\n".join((result.stdout or "").strip().splitlines()[-10:])
        raise VersionEnvError(f"{what} under pyspark {version} failed (exit {result.returncode}): {tail}")
    return result.stdout


def run_matrix(version: str, out_json: Path, cache: Path = CACHE, timeout: float = 900.0) -> dict:
    """Run every support-matrix row under PySpark ``version``; return the results it wrote.

    The run happens in a child process (:func:`run_in_venv`). Progress goes to
    stderr, one line per row.
    """
    out_json = Path(out_json)
    out_json.unlink(missing_ok=True)
    _say(f"running the support matrix under pyspark {version}")
    run_in_venv(version, ["-m", "pack_lab.support_matrix", "--run", str(out_json)], "the matrix", cache, timeout)
    if not out_json.exists():
        raise VersionEnvError(f"the matrix under pyspark {version} wrote no {out_json.name}")
    return json.loads(out_json.read_text(encoding="utf-8"))
