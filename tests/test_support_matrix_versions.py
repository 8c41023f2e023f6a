"""The support matrix under the other PySpark release lines, each in its own cached virtual environment.

Marker ``spark_versions``: these tests build ``.cache/pyspark-<version>/`` on
first use (pip downloads pyspark, ~450 MB per version) and run every row of
``pack_lab/support_matrix.py`` there in a child process (about two minutes per
version on 2 cores). Each version's outcomes must equal the run recorded in
``other_versions`` in ``tests/data/support_matrix_results.json``; re-record with
``UPDATE_MATRIX=1`` after a deliberate change, then rewrite the reference's
table with ``python scripts/skills.py generate``.
Skip the group locally with ``-m "not spark_versions"``; CI runs it.

The unit tests at the bottom check the machinery itself (venv caching, failure
clean-up, change detection, rendering) without building anything.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pack_lab import spark_versions as sv
from pack_lab import support_matrix as sm


@pytest.mark.spark_versions
@pytest.mark.slow
@pytest.mark.parametrize("version", sv.OTHER_VERSIONS)
def test_matrix_outcomes_unchanged_on_version(version, tmp_path):
    run = sv.run_matrix(version, tmp_path / f"{version}.json")
    # The child really ran that release, not the pack's pinned one.
    assert run["spark_version"] == version
    if os.environ.get("UPDATE_MATRIX") == "1":
        sm.save_results(run["rows"], version, meta=run)
    recorded = sm.load_run(version)
    assert recorded["spark_version"] == version
    assert run["trigger_api"] == recorded["trigger_api"]
    assert sm.changed_rows(run["rows"], recorded["rows"]) == []


def test_saving_one_version_keeps_the_others(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(sm.RESULTS_PATH.read_text(encoding="utf-8"), encoding="utf-8")
    before = sm.load_all_results(path)
    changed = dict(before["4.2.1"])
    first = sm.ROWS[0].name
    changed[first] = dict(changed[first], observed="X")
    sm.save_results(changed, "4.2.1", path=path, meta={"trigger_api": "realTime= keyword"})
    after = sm.load_all_results(path)
    assert after["4.2.1"][first]["observed"] == "X"
    assert after["4.1.4"] == before["4.1.4"] and after["4.3.0"] == before["4.3.0"]
    sm.save_results(before["4.3.0"], "4.3.0", path=path)
    assert sm.load_all_results(path)["4.2.1"][first]["observed"] == "X"  # pinned save keeps others
    assert not path.with_name(path.name + ".tmp").exists()


def test_markdown_block_is_the_table_of_the_parsed_file():
    data = json.loads(sm.RESULTS_PATH.read_text(encoding="utf-8"))
    assert sm.markdown_block(data) == sm.render_table(sm.ROWS, sm.load_all_results())


def test_every_version_line_has_a_recorded_run():
    for version in sv.ALL_VERSIONS:
        run = sm.load_run(version)
        assert run["spark_version"] == version
        assert {row.name for row in sm.ROWS} == set(run["rows"]), version


def test_recorded_runs_show_the_version_gates():
    """What the reference's version gate in SKILL.md rests on, read from the recorded runs."""
    runs = {v: sm.load_run(v)["rows"] for v in sv.ALL_VERSIONS}
    stateful = ("`dropDuplicates`", "`groupBy().count()`", "tumbling window aggregation")
    for name in stateful:
        assert runs["4.1.4"][name]["observed"] == sm._ALLOWLIST
        assert runs["4.2.1"][name]["observed"] == sm._ALLOWLIST
        assert runs["4.3.0"][name]["observed"] == sm.ACCEPTED
    for version in sv.ALL_VERSIONS:  # stateless real-time queries run on every line
        assert runs[version]["projection (`select`, `selectExpr`)"]["observed"] == sm.ACCEPTED
        assert runs[version]["stream-static join, broadcast"]["observed"] == sm.ACCEPTED
    assert runs["4.1.4"]["`trigger(realTime=True)`"]["observed"] == "TypeError"
    assert sm.load_run("4.1.4")["trigger_api"].startswith("JVM Trigger.RealTime")
    assert sm.load_run("4.2.1")["trigger_api"] == "realTime= keyword"


# ------------------------------------------------------------ the machinery


class _FakeRun:
    """Stands in for subprocess.run: records commands, creates the venv's python, can fail."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, cmd, **_kwargs):
        self.calls.append(cmd)
        if self.fail_on and self.fail_on in " ".join(cmd):
            return subprocess.CompletedProcess(cmd, 1, stdout="boom: no network\n")
        if cmd[1:3] == ["-m", "venv"]:
            python = Path(cmd[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("", encoding="utf-8")
        return subprocess.CompletedProcess(cmd, 0, stdout="")


def test_venv_is_built_once_then_reused(tmp_path):
    run = _FakeRun()
    python = sv.ensure_venv("4.2.1", cache=tmp_path, run=run)
    assert python == tmp_path / "pyspark-4.2.1" / "bin" / "python"
    assert any("pyspark==4.2.1" in c for c in run.calls[1])
    assert sv.is_ready("4.2.1", cache=tmp_path)
    again = _FakeRun()
    assert sv.ensure_venv("4.2.1", cache=tmp_path, run=again) == python
    assert again.calls == []  # cached: nothing rebuilt


def test_failed_build_leaves_nothing_and_names_the_step(tmp_path):
    with pytest.raises(sv.VersionEnvError, match=r"pip install pyspark==4\.1\.4 failed.*no network"):
        sv.ensure_venv("4.1.4", cache=tmp_path, run=_FakeRun(fail_on="pip"))
    assert list(tmp_path.iterdir()) == []
    assert not sv.is_ready("4.1.4", cache=tmp_path)


def test_stale_or_half_built_venv_is_rebuilt(tmp_path):
    sv.ensure_venv("4.2.1", cache=tmp_path, run=_FakeRun())
    marker = tmp_path / "pyspark-4.2.1" / ".ready"
    marker.write_text(json.dumps({"requirements": ["pyspark==4.2.0"]}), encoding="utf-8")
    assert not sv.is_ready("4.2.1", cache=tmp_path)
    run = _FakeRun()
    sv.ensure_venv("4.2.1", cache=tmp_path, run=run)
    assert run.calls and sv.is_ready("4.2.1", cache=tmp_path)


def test_changed_rows_reports_each_kind_of_change():
    recorded = sm.load_run("4.2.1")["rows"]
    assert sm.changed_rows(dict(recorded), recorded) == []
    name = next(iter(recorded))
    flipped = dict(recorded, **{name: dict(recorded[name], observed="SOMETHING_ELSE")})
    assert any(name in c and "SOMETHING_ELSE" in c for c in sm.changed_rows(flipped, recorded))
    moved = dict(recorded, **{name: dict(recorded[name], stage="elsewhere")})
    assert sm.changed_rows(moved, recorded)
    missing = {k: v for k, v in recorded.items() if k != name}
    assert any("not run" in c for c in sm.changed_rows(missing, recorded))
    assert any("no recorded outcome" in c for c in sm.changed_rows(recorded, missing))


def test_table_has_one_column_per_version():
    table = sm.render_table(sm.ROWS, sm.load_all_results())
    header = table.splitlines()[0]
    for version in sv.ALL_VERSIONS:
        assert f"PySpark {version}" in header
    assert header.index("PySpark 4.1.4") < header.index("PySpark 4.2.1") < header.index("PySpark 4.3.0")
    assert len(table.splitlines()) == len(sm.ROWS) + 2


def test_a_missing_version_result_is_a_problem():
    results = sm.load_all_results()
    first = sm.ROWS[0].name
    results["4.1.4"] = {k: v for k, v in results["4.1.4"].items() if k != first}
    text = Path(sm.__file__).resolve().parent.parent.joinpath(
        "references", "real-time-mode.md").read_text(encoding="utf-8")
    assert any("under pyspark 4.1.4" in p for p in sm.problems(text, results=results))


def test_shims_leave_a_release_with_the_keyword_alone(monkeypatch):
    """On 4.3 the runner must not patch the trigger: the pinned column is PySpark's own API."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    from pack_lab import rtm_lab

    monkeypatch.setattr(rtm_lab, "MIN_SPARK_VERSION", rtm_lab.MIN_SPARK_VERSION)  # restored after
    before = DataStreamWriter.trigger
    used = sm.install_version_shims()
    assert used["trigger_api"] == "realTime= keyword"
    assert DataStreamWriter.trigger is before
