"""The fast foreach path under PySpark 4.1.4 and 4.2.1, each in its cached virtual environment.

Marker ``spark_versions`` (CI's second group): ``pack_lab/foreach_lab.py`` runs
in ``.cache/pyspark-<version>/`` (built on first use by ``pack_lab/spark_versions.py``)
with the jar the set-up compiled against the pinned 4.3.0, and runs every
scenario through stock ``foreach`` and through ``start_foreach_query``.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from pack_lab import foreach_lab as lab
from pack_lab import spark_versions as sv


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
    for scenario in ("raise", "kill"):
        fast_error, stock_error = fast[scenario]["query_error"], stock[scenario]["query_error"]
        assert fast_error and stock_error
        # Stock foreach fails the task with the worker's error; the fast path with it too, or, when its fail-fast
        # interrupt broke the source's wait for rows, with that interrupt caused by it: never the bare interrupt.
        stock_how, stock_kind = lab.reported_error(stock_error)
        fast_how, fast_kind = lab.reported_error(fast_error)
        assert stock_how == "error", stock_error[:1000]
        assert fast_how in ("error", "cause") and fast_kind == stock_kind, fast_error[:3000]
        # Same close() calls, same rows seen as stock foreach on this version.
        assert fast[scenario]["close_errors"] == stock[scenario]["close_errors"]
        assert fast[scenario]["rows_seen"] == stock[scenario]["rows_seen"]
    assert "boom on row 7" in fast["raise"]["query_error"]
    assert lab.reported_error(fast["raise"]["query_error"])[1] in ("[FOREACH_USER_FUNCTION_ERROR]", "[PYTHON_EXCEPTION]")
    assert lab.reported_error(fast["kill"]["query_error"])[1] == "Python worker exited unexpectedly"
    assert fast["raise"]["close_errors"] == ["ValueError('boom on row 7')"]
    assert fast["kill"]["close_errors"] == []
