"""What a newcomer runs first: the copy routes in a fresh home, the license, what gets packaged, validate's message.

(The Python floor is in tests/test_python_floor.py; one short description is PLUG010, tested
with the other manifest rules in tests/test_install.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.package import install_files

NAME = "spark-rtm-lakebase"
ROUTE_RE = re.compile(r"`(mkdir -p [^`]+ && cp -r dist/[^`]+)`")


@pytest.mark.parametrize("rel", ["README.md", "docs/getting-started.md"])
def test_each_copy_route_works_in_a_fresh_home(rel, tmp_path):
    routes = ROUTE_RE.findall((REPO / rel).read_text(encoding="utf-8"))
    assert len(routes) == 3, routes  # Claude Code, Codex, Cursor
    assert not re.search(r"(?<!&& )`cp -r dist/", (REPO / rel).read_text(encoding="utf-8"))  # no bare cp left
    work = tmp_path / "clone"
    (work / "dist" / NAME).mkdir(parents=True)
    (work / "dist" / NAME / "SKILL.md").write_text("---\nname: spark-rtm-lakebase\n---\n")
    for i, route in enumerate(routes):
        home = tmp_path / f"home{i}"
        home.mkdir()  # a fresh home: no ~/.claude, ~/.agents or ~/.cursor yet
        proc = subprocess.run(["bash", "-c", route], cwd=work, env={"HOME": str(home), "PATH": os.environ["PATH"]},
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (route, proc.stderr)
        skills_dir = route.split("mkdir -p ", 1)[1].split(" ", 1)[0].replace("~", str(home))
        assert (Path(skills_dir) / NAME / "SKILL.md").is_file(), route


def test_readme_says_a_local_marketplace_keeps_the_clones_path():
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "moving or deleting the clone breaks it" in text
    assert f"claude plugin marketplace remove {NAME}" in text


def test_the_license_is_apache_2_full_text_and_ships_with_the_skill():
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text
    plugin = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["skill"]["plugin"]
    assert plugin["license"] == "Apache-2.0"
    assert re.search(r"^license: Apache-2.0$", (REPO / "SKILL.md").read_text(encoding="utf-8"), re.M)
    assert "LICENSE" in install_files(REPO)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, timeout=60,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
                        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"})


def _tree(root: Path) -> None:
    for rel in ("SKILL.md", "LICENSE", "agents/openai.yaml", "references/a.md", "rtm_lakebase/__init__.py",
                "rtm_lakebase/jvm/W.java", "examples/job.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")


def test_only_files_git_tracks_are_packaged(tmp_path):
    root = tmp_path / "pack"
    _tree(root)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "pack")
    (root / "rtm_lakebase" / "scratch.py").write_text("print('mine')\n")  # untracked: never shipped
    (root / "references" / "notes.md").write_text("draft\n")
    (root / "examples" / "new_job.py").write_text("x\n")
    _git(root, "add", "examples/new_job.py")  # added, not yet committed: tracked, so shipped
    files = install_files(root)
    assert "rtm_lakebase/scratch.py" not in files and "references/notes.md" not in files
    assert "examples/new_job.py" in files and "rtm_lakebase/__init__.py" in files and "LICENSE" in files
    (root / "examples" / "job.py").unlink()  # tracked but deleted: nothing to copy
    assert "examples/job.py" not in install_files(root)


def test_a_copy_outside_git_packages_every_file(tmp_path):
    root = tmp_path / "unpacked"
    _tree(root)
    (root / "rtm_lakebase" / "extra.py").write_text("x\n")
    assert "rtm_lakebase/extra.py" in install_files(root)


def test_the_repository_packages_no_untracked_file():
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True,
                             check=True).stdout.split()
    assert set(install_files(REPO)) <= set(tracked)


_BLOCK = ("import runpy, sys\n"
          "sys.modules['jsonschema'] = None  # as in package.sh's small environment, which lacks it\n"
          "sys.argv = ['scripts/skills.py', 'validate', '--no-external']\n"
          "runpy.run_path('scripts/skills.py', run_name='__main__')\n")


def test_validate_without_a_dev_dependency_says_what_to_run():
    proc = subprocess.run([sys.executable, "-c", _BLOCK], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "validate needs the Python package 'jsonschema'" in line
    assert "bash scripts/setup.sh" in line and ".venv/bin/python scripts/skills.py validate" in line


def test_validate_in_package_sh_environment_says_what_to_run():
    venv_python = REPO / ".cache" / "package-venv" / "bin" / "python"
    if not venv_python.exists():
        pytest.skip("scripts/package.sh has not created .cache/package-venv here")
    proc = subprocess.run([str(venv_python), "scripts/skills.py", "validate"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "needs the Python package" in line and "bash scripts/setup.sh" in line
