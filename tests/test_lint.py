"""ruff (pyflakes, bugbear, import order, pyupgrade; config in pyproject.toml) finds nothing in the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_ruff_is_clean_on_the_repository():
    result = ruff(".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_with_the_pack_config_reports_each_selected_rule(tmp_path):
    """The config really selects the rules: one finding of each family in a scratch file."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "bad.py").write_text(
        "import sys\nimport os\nfrom typing import List\n\n\n"
        "def f(xs: List[int] = []):  # noqa: E501\n    return zip(xs, xs)\n", encoding="utf-8")
    result = ruff("bad.py", cwd=tmp_path)
    codes = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("bad.py:")}
    assert {"F401", "I001", "UP035", "B006", "B905", "RUF100"} <= codes, result.stdout
