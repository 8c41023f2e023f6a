"""`demo --master standalone`: the demo on a master and two workers it starts and stops itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _cluster_processes(root: str) -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if root in cmd:
                out.append(cmd[:120])
    return out


def test_demo_runs_on_a_standalone_cluster_and_stops_it(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "pack_lab.demo", "--master", "standalone", "--path", "rtm-jvm", "--rows", "3000",
         "--rate", "500", "--output-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "[demo] [cluster] master spark://127.0.0.1:" in run.stdout
    assert "RESULT: OK" in run.stdout
    root = re.search(r"\(logs in (/\S+rtm-pack-cluster-[^/\s]+)/logs\)", run.stdout).group(1)
    assert _cluster_processes(root) == [] and not Path(root).exists()  # the daemons went with the demo
