"""The fast foreach path under PySpark 4.1.4 and 4.2.1, each in its cached virtual environment.

Marker ``spark_versions`` (CI's second group): ``pack_lab/foreach_lab.py`` runs
in ``.cache/pyspark-<version>/`` (built on first use by ``pack_lab/spark_versions.py``)
with the jar the set-up compiled against the pinned 4.3.0, and runs every
scenario through stock ``foreach`` and through ``start_foreach_query``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from pack_lab import spark_versions as sv


def _error_kind(message: str) -> str:
    """What a query failure says went wrong: the error class (``[FOREACH_USER_FUNCTION_ERROR]``)
    or, for a crashed worker, Spark's sentence about it."""
    found = re.search(r"terminated with exception: (\[[A-Z_.]+\])", message)
    if found:
        return found.group(1)
    assert "Python worker exited unexpectedly" in message, message[:400]
    return "Python worker exited unexpectedly"


def _run_lab(version: str, out) -> dict:
    python = sv.ensure_venv(version)
    env = dict(os.environ)
    env.update({"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python),
                "PYTHONPATH": os.pathsep.join(p for p in (str(sv.ROOT), os.environ.get("PYTHONPATH")) if p)})
    env.pop("SPARK_HOME", None)
    result = subprocess.run([str(python), "-m", "pack_lab.foreach_lab", "--run", str(out)], cwd=str(sv.ROOT),
                            env=env, timeout=900, capture_output=True, text=True)
    assert result.returncode == 0 and out.exists(), result.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.spark_versions
@pytest.mark.slow
@pytest.mark.parametrize("version", sv.OTHER_VERSIONS)
def test_fast_foreach_runs_and_matches_stock_on_version(version, tmp_path, fast_jars):
    run = _run_lab(version, tmp_path / f"{version}.json")
    assert run["spark_version"] == version  # the child really ran that release
    stock, fast = run["stock"], run["fast"]
    for path in (stock, fast):
        deliver = path["deliver"]
        assert deliver["ids"] == list(range(deliver["sent"]))  # every row, once
        assert set(deliver["epoch_duplicates"].values()) == {0}
    # Rows handed over as they come: each trickled row reached process() in the same epoch.
    assert len(fast["deliver"]["trickle_epochs"]) == 2 and len(set(fast["deliver"]["trickle_epochs"])) == 1
    known_defect = None
    for scenario in ("raise", "kill"):
        assert fast[scenario]["query_error"] and stock[scenario]["query_error"]
        if ("InterruptedException" in fast[scenario]["query_error"]
                and "InterruptedException" not in stock[scenario]["query_error"]):
            # Known defect (issue 22 note): the fail-fast watcher interrupts the task when the worker fails and, on
            # this release, the query reports the interrupt instead of the worker's error or crash.
            known_defect = fast[scenario]["query_error"][:300]
            continue
        # Same error class, same close() calls, same rows seen as stock foreach on this version.
        assert _error_kind(fast[scenario]["query_error"]) == _error_kind(stock[scenario]["query_error"])
        assert fast[scenario]["close_errors"] == stock[scenario]["close_errors"]
        assert fast[scenario]["rows_seen"] == stock[scenario]["rows_seen"]
    if not known_defect:
        assert fast["raise"]["close_errors"] == ["ValueError('boom on row 7')"]
    else:
        pytest.xfail(f"a failed worker's query names the interrupt, not the worker's error, on {version}: "
                     f"{known_defect}")
    assert fast["kill"]["close_errors"] == []
