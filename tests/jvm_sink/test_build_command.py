"""`python -m rtm_lakebase.jvm build`: the jars built from a copy of the package alone, against the venv's PySpark.

The copy sits outside the repository (as the installed skill's folder or a wheel's
files do), so nothing of the repository's scripts is used. One build per test
session (two javac runs); the refusals compile nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HAVE_JAVAC = shutil.which("javac") is not None or bool(
    os.environ.get("JAVA_HOME") and os.access(os.path.join(os.environ["JAVA_HOME"], "bin", "javac"), os.X_OK))


def copy_package(dest: Path) -> Path:
    shutil.copytree(ROOT / "rtm_lakebase", dest / "rtm_lakebase", ignore=shutil.ignore_patterns("build", "__pycache__"))
    return dest


def run(cwd: Path, *args: str, python: list[str] | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PG_JDBC_JAR", "RTM_JVM_SINK_JAR",
                                                             "RTM_FOREACH_JAR")}
    base.update(env)
    return subprocess.run([*(python or [sys.executable]), *args], cwd=cwd, capture_output=True, text=True,
                          env=base, timeout=900)


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    if not HAVE_JAVAC:
        pytest.skip("no javac on this machine")
    skill = copy_package(tmp_path_factory.mktemp("installed-skill"))
    (skill / "rtm_lakebase" / "sink" / "sqlstates.json").write_text('{"08006": "connection"}\n')
    driver = skill / "postgresql-42.7.14.jar"
    driver.write_bytes(b"PK")
    first = run(skill, "-m", "rtm_lakebase.jvm", "build", "--jdbc", str(driver))
    again = run(skill, "-m", "rtm_lakebase.jvm", "build", "--jdbc", str(driver))
    return skill, driver, first, again


@pytest.mark.slow
def test_the_installed_package_builds_both_jars_and_prints_their_paths(built):
    skill, driver, first, _again = built
    assert first.returncode == 0, first.stderr
    sink_jar = skill / "rtm_lakebase" / "jvm" / "build" / "rtm-lakebase-jvm-sink.jar"
    fast_jar = skill / "rtm_lakebase" / "foreach" / "build" / "rtm-lakebase-foreach.jar"
    assert first.stdout.splitlines() == [f"the JVM sink: {sink_jar}", f"the fast foreach writer: {fast_jar}",
                                         f"the Postgres JDBC driver: {driver}"]
    assert "compiling the JVM sink" in first.stderr and "compiling the fast foreach writer" in first.stderr
    with zipfile.ZipFile(sink_jar) as z:
        names = set(z.namelist())
    java = {f"rtm_lakebase/jvm/{p.stem}.class" for p in (skill / "rtm_lakebase" / "jvm").glob("*.java")}
    assert java <= names  # every .java in the folder, whatever classes it holds
    # The sink folder's JSON resources ride along, where Outcomes.java loads them (Outcomes.RESOURCE).
    assert {"rtm_lakebase/jvm/outcomes.json", "rtm_lakebase/jvm/sqlstates.json"} <= names
    with zipfile.ZipFile(fast_jar) as z:
        assert "rtm_lakebase/foreach/LowLatencyPythonForeachWriter.class" in z.namelist()
    assert not list(sink_jar.parent.glob(".tmp.*"))
    # The package's own jar checks accept what it built (same source hash), from that copy.
    check = run(skill, "-c", "from rtm_lakebase.foreach import foreach_jars; from rtm_lakebase.jvm.sink import "
                "_writer_jar; print(foreach_jars()[0]); print(_writer_jar())")
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines() == [str(fast_jar), str(sink_jar)]


@pytest.mark.slow
def test_a_second_build_with_nothing_changed_compiles_nothing(built):
    _skill, _driver, _first, again = built
    assert again.returncode == 0, again.stderr
    assert "compiling" not in again.stderr and len(again.stdout.splitlines()) == 3


def _path_without_javac(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return str(bin_dir)


def _one_line_failure(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("rtm_lakebase.jvm build: ")
    return lines[0]


def test_without_javac_it_says_which_jdk_to_install(tmp_path):
    skill = copy_package(tmp_path)
    env = {"PATH": _path_without_javac(tmp_path)}
    proc = run(skill, "-m", "rtm_lakebase.jvm", "build", "--out", str(tmp_path / "jars"), JAVA_HOME="", **env)
    line = _one_line_failure(proc)
    assert "javac not found" in line and "openjdk-17-jdk-headless" in line and "JAVA_HOME" in line
    assert not (tmp_path / "jars").exists()


@pytest.mark.skipif(not HAVE_JAVAC, reason="no javac on this machine")
def test_without_pyspark_it_says_to_install_it(tmp_path):
    skill = copy_package(tmp_path)
    # -S: no site-packages, so no pyspark (the package itself needs only the standard library to build).
    proc = run(skill, "-S", "-m", "rtm_lakebase.jvm", "build", "--out", str(tmp_path / "jars"))
    line = _one_line_failure(proc)
    assert "pyspark is not installed" in line and "pip install" in line


def test_a_wrong_driver_path_is_named_before_compiling(tmp_path):
    skill = copy_package(tmp_path)
    proc = run(skill, "-m", "rtm_lakebase.jvm", "build", "--jdbc", str(tmp_path / "missing.jar"))
    line = _one_line_failure(proc)
    assert "--jdbc=" in line and "missing.jar is not a file" in line
    proc = run(skill, "-m", "rtm_lakebase.jvm", "build", PG_JDBC_JAR=str(tmp_path / "gone.jar"))
    assert "$PG_JDBC_JAR=" in _one_line_failure(proc)
    assert not (skill / "rtm_lakebase" / "jvm" / "build").exists()


def test_no_command_is_a_usage_error(tmp_path):
    proc = run(copy_package(tmp_path), "-m", "rtm_lakebase.jvm")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "build" in proc.stderr
