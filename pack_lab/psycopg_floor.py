"""The oldest psycopg the sink's tests pass with: the floor of pyproject.toml's ``psycopg`` range.

For each version given, a throwaway virtual environment ``.cache/psycopg-<version>/`` gets
``psycopg[binary]==<version>`` and sees everything else through the pack's own ``.venv``
(a ``.pth`` line, placed after its own packages, so its psycopg wins); then the tests that
use psycopg run in it (the sink's, the connection helpers', the attribution pipeline's), on
the session Postgres (``PG_DSN`` or the embedded server) and the local Spark::

    .venv/bin/python -m pack_lab.psycopg_floor 3.1.20 3.2.1 --out tests/data/psycopg_floor.json

The tests stop at the first failure (``-x``): a version that fails needs no more to be below the
floor. The JSON records per version whether it installed, the test counts, the first failure,
and the machine's load; ``tests/test_install_ranges.py`` checks that pyproject's floor is a
version that passed and that the release before it failed. The environments are removed
after each run (``--keep`` keeps them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
#: The tests that import psycopg through rtm_lakebase (slow ones left out: they add time, not coverage).
TESTS = ("tests/sink", "tests/test_attribution.py")
MARKERS = "not slow"


def _say(message: str) -> None:
    print(f"[psycopg-floor] {message}", file=sys.stderr, flush=True)


def _venv(version: str, base_python: Path) -> tuple[Path | None, str]:
    """(interpreter, pip's last lines) of a venv with that psycopg over the pack's .venv; None when it will not install."""
    target = CACHE / f"psycopg-{version}"
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    python = target / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    base_site = sysconfig.get_paths()["purelib"] if base_python == Path(sys.executable) else subprocess.run(
        [str(base_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "zz-pack-venv.pth").write_text(base_site + "\n", encoding="utf-8")
    pip = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
                          f"psycopg[binary]=={version}"], capture_output=True, text=True)
    tail = "\n".join((pip.stdout + pip.stderr).strip().splitlines()[-3:])
    if pip.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        return None, tail
    return python, tail


def run_version(version: str, keep: bool = False) -> dict:
    started = time.monotonic()
    python, pip_tail = _venv(version, Path(sys.executable))
    result: dict = {"version": version, "installed": python is not None}
    if python is None:
        result["install_error"] = pip_tail
        return result
    try:
        probe = subprocess.run([str(python), "-c", "import psycopg; print(psycopg.__version__, psycopg.pq.__impl__)"],
                               capture_output=True, text=True)
        result["imported"] = probe.stdout.strip()
        env = dict(os.environ, PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python),
                   PYTHONPATH=str(ROOT))
        _say(f"psycopg {version}: running {' '.join(TESTS)} -m '{MARKERS}'")
        proc = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS, "-m", MARKERS,
                               "-x", "-rf"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
        summary = [line for line in proc.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", summary[-1])} \
            if summary else {}
        result.update({"exit_code": proc.returncode, "counts": counts,
                       "failures": [line[len("FAILED "):][:300] for line in proc.stdout.splitlines()
                                    if line.startswith(("FAILED ", "ERROR "))][:10],
                       "passed": proc.returncode == 0 and counts.get("passed", 0) > 0})
    finally:
        if not keep:
            shutil.rmtree(CACHE / f"psycopg-{version}", ignore_errors=True)
    result["seconds"] = round(time.monotonic() - started)
    _say(f"psycopg {version}: {'passed' if result.get('passed') else 'failed'} {result.get('counts')}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", action="store_true", help="keep the .cache/psycopg-<version>/ environments")
    args = parser.parse_args(argv)
    runs = [run_version(v, args.keep) for v in args.versions]
    data = {
        "command": "python -m pack_lab.psycopg_floor " + " ".join(args.versions) + f" --out {args.out}",
        "tests": list(TESTS), "markers": MARKERS, "stops_at_first_failure": True,
        "python": sys.version.split()[0],
        "postgres": "PG_DSN" if os.environ.get("PG_DSN") else "embedded (tests/conftest.py)",
        "load_average_at_start": list(os.getloadavg()),
        "note": "run on a shared 2-core machine; only pass/fail is recorded, no timing is claimed",
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
