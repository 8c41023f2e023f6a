"""scripts/build_jvm_sink.sh: cached build with a content stamp, and clear messages when javac or the driver is missing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_jvm_sink.sh"
SOURCE = ROOT / "rtm_lakebase" / "jvm" / "PostgresForeachWriter.java"
FOREACH_SOURCE = ROOT / "rtm_lakebase" / "foreach" / "LowLatencyPythonForeachWriter.java"
RATE_SOURCE_DIR = ROOT / "pack_lab" / "jvm"  # the lab's rate source, built by the same script
TOOLS = ["dirname", "sha256sum", "cut", "id", "mktemp", "cat", "grep", "ls", "head", "mkdir", "rm", "mv",
         "basename"]


def copy_of_the_repo(tmp_path: Path) -> Path:
    """The script, the package and the lab's build in a throwaway tree (the script finds everything relative to itself)."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copytree(ROOT / "rtm_lakebase", root / "rtm_lakebase", ignore=shutil.ignore_patterns("build", "__pycache__"))
    (root / "pack_lab" / "jvm").mkdir(parents=True)
    for source in RATE_SOURCE_DIR.glob("*.java"):
        shutil.copy(source, root / "pack_lab" / "jvm" / source.name)
    for name in ("__init__.py", "rate_source.py", "build_rate_source.py"):
        shutil.copy(ROOT / "pack_lab" / name, root / "pack_lab" / name)
    shutil.copy(SCRIPT, root / "scripts" / SCRIPT.name)
    return root


def sources_sha(folder: Path, *resources: Path) -> str:
    digest = hashlib.sha256()
    for path in [*sorted(folder.glob("*.java"), key=lambda p: p.name.encode()), *resources]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def sandbox_path(tmp_path: Path, with_javac: bool) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS + (["javac"] if with_javac else []):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run(root: Path, path: str, **env) -> subprocess.CompletedProcess:
    base = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"), "PY": sys.executable}
    base.update(env)
    return subprocess.run(["/bin/bash", str(root / "scripts" / SCRIPT.name)], capture_output=True, text=True,
                          env=base, timeout=300)


def test_without_javac_it_says_how_and_lets_the_python_path_go_on(tmp_path):
    root = copy_of_the_repo(tmp_path)
    driver = tmp_path / "postgresql.jar"
    driver.write_bytes(b"PK")
    result = run(root, sandbox_path(tmp_path, with_javac=False), PG_JDBC_JAR=str(driver))
    assert result.returncode == 0, result.stderr
    assert "javac not found" in result.stderr and "openjdk-17-jdk-headless" in result.stderr
    assert "the Python sink works" in result.stderr
    assert not (root / "rtm_lakebase" / "jvm" / "build" / "rtm-lakebase-jvm-sink.jar").exists()


def test_under_ci_a_missing_javac_stops_the_set_up(tmp_path):
    root = copy_of_the_repo(tmp_path)
    driver = tmp_path / "postgresql.jar"
    driver.write_bytes(b"PK")
    # No apt-get on this PATH, so nothing can be installed: CI must not go on to skip the tests.
    result = run(root, sandbox_path(tmp_path, with_javac=False), PG_JDBC_JAR=str(driver), CI="true")
    assert result.returncode == 1
    assert "javac not found" in result.stderr and "could not be built" in result.stderr


def test_a_wrong_pg_jdbc_jar_is_named(tmp_path):
    root = copy_of_the_repo(tmp_path)
    result = run(root, sandbox_path(tmp_path, with_javac=False), PG_JDBC_JAR=str(tmp_path / "missing.jar"))
    assert "PG_JDBC_JAR=" in result.stderr and "missing.jar is not a file" in result.stderr


@pytest.mark.skipif(shutil.which("javac") is None, reason="no javac on this machine")
def test_the_jar_is_built_once_and_again_when_the_source_changes(tmp_path):
    root = copy_of_the_repo(tmp_path)
    driver = tmp_path / "postgresql.jar"
    driver.write_bytes(b"PK")
    path = sandbox_path(tmp_path, with_javac=True)
    build = root / "rtm_lakebase" / "jvm" / "build"
    jar = build / "rtm-lakebase-jvm-sink.jar"

    first = run(root, path, PG_JDBC_JAR=str(driver))
    assert first.returncode == 0, first.stderr
    assert "compiling the JVM sink" in first.stderr
    with zipfile.ZipFile(jar) as z:
        assert {"rtm_lakebase/jvm/PostgresForeachWriter.class", "rtm_lakebase/jvm/PgConnector.class"} <= \
            set(z.namelist())
    assert not list(build.glob(".tmp.*"))  # nothing left behind

    foreach_jar = root / "rtm_lakebase" / "foreach" / "build" / "rtm-lakebase-foreach.jar"
    assert "compiling the fast foreach writer" in first.stderr
    with zipfile.ZipFile(foreach_jar) as z:
        assert "rtm_lakebase/foreach/LowLatencyPythonForeachWriter.class" in z.namelist()
    assert foreach_jar.with_suffix(".sha256").read_text().strip() == \
        hashlib.sha256(FOREACH_SOURCE.read_bytes()).hexdigest()

    rate_jar = root / "pack_lab" / "jvm" / "build" / "rtm-lab-rate-source.jar"
    assert "compiling lab rate source" in first.stderr
    with zipfile.ZipFile(rate_jar) as z:
        assert "pack_lab/jvm/RateSource.class" in z.namelist()
    assert rate_jar.with_suffix(".sha256").read_text().strip() == sources_sha(RATE_SOURCE_DIR)

    again = run(root, path, PG_JDBC_JAR=str(driver))
    assert again.returncode == 0 and "compiling" not in again.stderr  # cached

    foreach_source = root / "rtm_lakebase" / "foreach" / FOREACH_SOURCE.name
    foreach_source.write_text(foreach_source.read_text() + "\n// changed\n")
    only_foreach = run(root, path, PG_JDBC_JAR=str(driver))
    assert only_foreach.returncode == 0 and "compiling the fast foreach writer" in only_foreach.stderr
    assert "compiling the JVM sink" not in only_foreach.stderr  # each jar has its own stamp

    source = root / "rtm_lakebase" / "jvm" / SOURCE.name
    source.write_text(source.read_text() + "\n// changed\n")
    changed = run(root, path, PG_JDBC_JAR=str(driver))
    assert changed.returncode == 0 and "compiling the JVM sink" in changed.stderr
    outcomes = root / "rtm_lakebase" / "sink" / "outcomes.json"
    assert (build / "rtm-lakebase-jvm-sink.sha256").read_text().strip() == sources_sha(source.parent, outcomes)
    with zipfile.ZipFile(build / "rtm-lakebase-jvm-sink.jar") as jar:  # where Outcomes.java loads it from
        assert jar.read("rtm_lakebase/jvm/outcomes.json") == outcomes.read_bytes()
    helper = next(p for p in source.parent.glob("*.java") if p != source)  # any file there counts
    helper.write_text(helper.read_text() + "\n// changed\n")
    assert "compiling the JVM sink" in run(root, path, PG_JDBC_JAR=str(driver)).stderr

    source.write_text(source.read_text() + "\nthis is not Java\n")
    broken = run(root, path, PG_JDBC_JAR=str(driver))
    assert broken.returncode == 1 and "javac failed" in broken.stderr
    assert not list(build.glob(".tmp.*"))


def test_the_wheel_ships_the_java_source_but_no_build_output(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "rtm_lakebase", src / "rtm_lakebase",
                    ignore=shutil.ignore_patterns("build", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", src / "pyproject.toml")
    (src / "rtm_lakebase" / "jvm" / "build").mkdir()
    (src / "rtm_lakebase" / "jvm" / "build" / "rtm-lakebase-jvm-sink.jar").write_bytes(b"PK")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
                           "-w", str(tmp_path / "wheels"), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Package would be ignored" not in proc.stderr
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "rtm_lakebase/jvm/PostgresForeachWriter.java" in names and "rtm_lakebase/jvm/sink.py" in names
    assert {f"rtm_lakebase/jvm/{p.name}" for p in SOURCE.parent.glob("*.java")} <= set(names)
    assert "rtm_lakebase/foreach/LowLatencyPythonForeachWriter.java" in names
    assert "rtm_lakebase/foreach/__init__.py" in names
    assert not [n for n in names if "/build/" in n or n.endswith((".jar", ".class"))]
