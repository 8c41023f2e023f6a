"""One Python floor: the README's, the interpreter finder's and pyproject's, and every pin package.sh installs accepts it.

Debian 12 ships Python 3.11.2; a pin needing 3.11.5 (pymdown-extensions 13.x) broke
``scripts/package.sh`` there while the README said 3.11+. pip is asked, for an interpreter
at the floor's first release (``--python-version 3.11``, i.e. 3.11.0), whether each pin
has a release file that installs (its ``Requires-Python`` included).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
#: The four pins scripts/package.sh installs into .cache/package-venv (it checks there are exactly four).
PACKAGE_PINS = ("markdown-it-py", "markdown", "pymdown-extensions", "pyyaml")


def floor() -> str:
    text = (REPO / "scripts" / "find_python.sh").read_text(encoding="utf-8")
    (major, minor), = set(re.findall(r"sys\.version_info >= \((\d+), (\d+)\)", text))
    return f"{major}.{minor}"


def test_the_readme_the_finder_and_pyproject_state_one_floor():
    found = floor()
    assert PYPROJECT["project"]["requires-python"] == f">={found}"
    finder = (REPO / "scripts" / "find_python.sh").read_text(encoding="utf-8")
    assert f"Python {found} or later is required" in finder
    for rel in ("README.md", "docs/getting-started.md"):
        stated = set(re.findall(r"Python (3\.\d+)\+", (REPO / rel).read_text(encoding="utf-8")))
        assert stated == {found}, (rel, stated)


def _pins(names) -> list[str]:
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    out = [p for p in dev if re.split(r"[=<>\[; ]", p, maxsplit=1)[0].lower() in names]
    assert len(out) == len(names), out
    return out


def test_every_pin_package_sh_installs_and_the_runtime_range_accept_the_floor(tmp_path):
    pins = _pins(PACKAGE_PINS) + list(PYPROJECT["project"]["dependencies"])
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--dry-run", "--ignore-installed",
           "--no-deps", "--only-binary=:all:", "--python-version", floor(), "--target", str(tmp_path / "t")]
    for platform in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"):
        cmd += ["--platform", platform]
    for pin in pins:
        proc = subprocess.run([*cmd, pin.replace("psycopg[binary]", "psycopg-binary")], capture_output=True,
                              text=True, timeout=300)
        if "Could not fetch URL" in proc.stderr or "NewConnectionError" in proc.stderr:
            pytest.fail(f"the package index is unreachable, so {pin} could not be checked: {proc.stderr[-300:]}")
        assert proc.returncode == 0, f"{pin} has no release for Python {floor()}: {proc.stderr[-800:]}"


def test_package_sh_installs_exactly_those_pins():
    script = (REPO / "scripts" / "package.sh").read_text(encoding="utf-8")
    assert 'want = {"markdown-it-py", "markdown", "pymdown-extensions", "pyyaml"}' in script
    assert "source \"$PACK_ROOT/scripts/find_python.sh\"" in script
