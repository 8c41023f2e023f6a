"""The package's runtime requirements are tested ranges, and installing it never replaces a cluster's Spark.

- psycopg: from the oldest release the sink's tests pass with (``tests/data/psycopg_floor.json``,
  written by ``python -m pack_lab.psycopg_floor``) to below 4.
- PySpark: only in the ``local`` extra (and the dev extra, the pack's own pin), never a requirement, so
  ``pip install`` of the wheel into an environment with another PySpark leaves that PySpark alone:
  the slow test installs the built wheel beside PySpark 4.1.4 (a cached venv, ``.cache/install-check/``)
  and checks it is still 4.1.4 afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
FLOOR_RECORD = REPO / "tests" / "data" / "psycopg_floor.json"
OTHER_SPARK = "4.1.4"


def _floor() -> str:
    (dep,) = PROJECT["dependencies"]
    m = re.fullmatch(r"psycopg\[binary\]>=(\d+\.\d+\.\d+),<4", dep)
    assert m, dep
    return m.group(1)


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def test_runtime_requirements_are_ranges_and_pyspark_is_only_an_extra():
    assert [d for d in PROJECT["dependencies"] if d.startswith("pyspark")] == []
    extras = PROJECT["optional-dependencies"]
    assert extras["local"] == ["pyspark==4.3.0"]
    assert "pyspark==4.3.0" in extras["dev"]  # scripts/setup.sh installs -e '.[dev]': the pinned Spark
    (dev_psycopg,) = [d for d in extras["dev"] if d.startswith("psycopg")]
    pinned = dev_psycopg.split("==")[1]
    assert _version(_floor()) <= _version(pinned) < (4,)  # the dev pin lies inside the runtime range


def test_the_psycopg_floor_is_the_oldest_release_the_sink_tests_pass_with():
    floor = _floor()
    record = json.loads(FLOOR_RECORD.read_text(encoding="utf-8"))
    runs = {r["version"]: r for r in record["runs"]}
    assert runs[floor]["passed"] and runs[floor]["counts"]["passed"] > 0, runs[floor]
    assert runs[floor]["imported"].startswith(floor)
    older = [v for v, r in runs.items() if _version(v) < _version(floor) and r["installed"]]
    assert older, "the floor was never compared with an older release"
    for v in older:  # every older release that installs failed the tests
        assert not runs[v]["passed"] and runs[v]["failures"], runs[v]
    assert record["command"].startswith("python -m pack_lab.psycopg_floor ")


def _build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "rtm_lakebase", src / "rtm_lakebase", ignore=shutil.ignore_patterns("build", "__pycache__"))
    for name in ("pyproject.toml", "LICENSE", "README.md"):
        shutil.copy(REPO / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                           "-w", str(tmp_path / "wheels"), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    return wheel


def test_the_wheel_requires_no_pyspark(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip() for line in z.read(meta).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    unconditional = [r for r in requires if "extra ==" not in r]
    assert unconditional == [f"psycopg[binary]<4,>={_floor()}"], requires
    assert 'pyspark==4.3.0; extra == "local"' in requires


@pytest.mark.slow
@pytest.mark.spark_versions
def test_installing_the_wheel_beside_pyspark_4_1_4_leaves_it_alone(tmp_path):
    from pack_lab import spark_versions

    python = spark_versions.ensure_venv(OTHER_SPARK, cache=spark_versions.CACHE / "install-check")
    wheel = _build_wheel(tmp_path)
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "uninstall", "-y", "-q", "spark-rtm-lakebase-pack"], capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_TARGET")}
    proc = subprocess.run([*pip, "install", str(wheel)], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Uninstalling pyspark" not in proc.stdout, proc.stdout
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m, pyspark, psycopg, rtm_lakebase.sink, rtm_lakebase.jvm.build;"
         " print(pyspark.__version__, m.version('pyspark'), psycopg.__version__, rtm_lakebase.sink.__file__)"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    spark_version, dist_version, psycopg_version, sink_file = probe.stdout.split()
    assert spark_version == dist_version == OTHER_SPARK  # still the environment's own Spark
    assert _version(_floor()) <= _version(psycopg_version) < (4,)
    assert "site-packages" in sink_file  # the wheel's copy, not the repository's


def test_the_install_lines_state_the_tested_range_and_the_extra():
    for rel in ("README.md", "docs/getting-started.md", "references/lakebase-sink-python.md"):
        text = (REPO / rel).read_text(encoding="utf-8")
        assert f"{_floor()} or later, below 4" in text, rel
        assert "[local]" in text and "python -m rtm_lakebase.jvm build" in text, rel
