"""The real pack passes the full validator: manifest, front matter, links, code blocks, imports, markdownlint, mkdocs.

This is the pack's own acceptance check (`python scripts/skills.py validate`
with the external tools). On failure the message lists every finding.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_pack_is_valid():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "skills.py"), "validate"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
