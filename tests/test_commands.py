"""The README's two commands, CI's entry point, and the set-up's prerequisite messages."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands():
    """The `bash …` lines of the README's "Two commands" section (Install has its own, e.g. package.sh)."""
    text = (ROOT / "README.md").read_text().split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("bash "):
                commands.append(line)
    return commands


def test_readme_gives_exactly_two_set_up_and_go_commands():
    commands = [c for c in _readme_commands() if not c.startswith("PG_DSN")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for command in commands:
        assert (ROOT / command.split()[1]).is_file()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci
    assert "set -euo pipefail" in ci


def _sandbox_path(tmp_path, tools):
    """A PATH holding only ``tools`` (symlinked), so a prerequisite can be made to vanish."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def _run_setup(path, extra_env=None):
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp")}
    env.update(extra_env or {})
    return subprocess.run(["/bin/bash", str(ROOT / "scripts" / "setup.sh")], capture_output=True,
                          text=True, env=env, timeout=60)


BASICS = ["dirname", "sed", "head", "cat", "cut", "sha256sum"]


def test_missing_java_is_named_with_the_fix(tmp_path):
    path = _sandbox_path(tmp_path, BASICS)
    (Path(path) / "python3").symlink_to(sys.executable)
    result = _run_setup(path)
    assert result.returncode == 1
    assert "Java 17 or later is required" in result.stderr
    assert "openjdk" in result.stderr


def test_missing_python_is_named_with_the_fix(tmp_path):
    path = _sandbox_path(tmp_path, BASICS + ["java"])
    result = _run_setup(path, {"PYTHON": ""})
    assert result.returncode == 1
    assert "Python 3.11 or later is required" in result.stderr


def test_old_java_is_refused(tmp_path):
    path = _sandbox_path(tmp_path, BASICS)
    (Path(path) / "python3").symlink_to(sys.executable)
    fake = Path(path) / "java"
    fake.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    fake.chmod(0o755)
    result = _run_setup(path)
    assert result.returncode == 1
    assert "found: openjdk version \"11.0.2\"" in result.stderr
