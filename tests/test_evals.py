"""Evals: the task file's format, every grader separates its reference answer from its known-wrong ones,
the `eval grade` report, and `eval run` end to end with a fake assistant.

Reference answers: evals/answers/reference/<task>/. Known-wrong answers:
evals/answers/wrong/<task>/<variant>/, each with EXPECTED_FAILURE naming the
check that must fail it (first line) and, optionally, text its evidence must
contain (second line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.evals.grade import CATEGORIES, Context, grade_task, load_tasks

SCRIPT = REPO / "scripts" / "skills.py"
ANSWERS = REPO / "evals" / "answers"
FAKE_AGENT = REPO / "tests" / "eval_fixtures" / "fake_agent.py"
TASKS = load_tasks()
BY_NAME = {t["name"]: t for t in TASKS["evals"]}


def _kinds(task):
    return {c["kind"] for c in task["checks"]} | ({"postgres"} if any(c.get("postgres") or c.get("driver") == "sink"
                                                                     for c in task["checks"]) else set())


def _marks(task):
    kinds = _kinds(task)
    marks = []
    if "spark" in kinds:
        marks += [pytest.mark.spark, pytest.mark.slow]
    if "run" in kinds:
        marks.append(pytest.mark.postgres)
    return marks


def _ctx(request, task) -> Context:
    kinds = _kinds(task)
    spark = request.getfixturevalue("spark") if "spark" in kinds else None
    dsn = request.getfixturevalue("pg_dsn") if any(c.get("postgres") for c in task["checks"]) else None
    return Context(spark=spark, pg_dsn=dsn)


REFERENCE = [pytest.param(t["name"], marks=_marks(t), id=t["name"]) for t in TASKS["evals"]]
WRONG = [pytest.param(t.name, v.name, marks=_marks(BY_NAME[t.name]), id=f"{t.name}/{v.name}")
         for t in sorted((ANSWERS / "wrong").iterdir()) for v in sorted(t.iterdir())]


def run_cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


# --- the task file ----------------------------------------------------------------------------------

def test_evals_json_has_the_published_fields_and_enough_tasks():
    data = json.loads((REPO / "evals" / "evals.json").read_text())
    assert data["skill_name"] == "spark-rtm-lakebase"
    evals = data["evals"]
    assert len(evals) >= 16
    assert [e["id"] for e in evals] == list(range(1, len(evals) + 1))
    for e in evals:
        # Agent Skills / skill-creator fields, then this pack's grading fields.
        assert isinstance(e["prompt"], str) and e["prompt"].strip()
        assert isinstance(e["expected_output"], str) and e["expected_output"].strip()
        assert isinstance(e["files"], list) and all((REPO / f).is_file() for f in e["files"])
        assert e["assertions"] and all(isinstance(a, str) for a in e["assertions"])
        assert e["interface"] in e["prompt"], "the prompt must name the interface the grader reads"
        assert e["checks"][0]["kind"] in ("interface", "rubric")
    counts = {c: sum(e["category"] == c for e in evals) for c in CATEGORIES}
    assert all(n >= 2 for n in counts.values()), counts


def test_every_task_has_a_reference_and_known_wrong_answers():
    for name in BY_NAME:
        assert (ANSWERS / "reference" / name).is_dir(), name
        variants = list((ANSWERS / "wrong" / name).iterdir())
        assert variants, name
        for v in variants:
            assert (v / "EXPECTED_FAILURE").read_text().strip()
    assert {p.name for p in (ANSWERS / "wrong").iterdir()} == set(BY_NAME)


def test_routing_covers_tasks_that_must_and_must_not_use_the_skill():
    routing = [t for t in TASKS["evals"] if t["category"] == "routing"]
    must_not = [t for t in routing if any(c["kind"] == "absent" for c in t["checks"])]
    must = [t for t in routing if any(c["kind"] == "chain" for c in t["checks"])]
    assert len(must_not) >= 2 and len(must) >= 2


# --- graders separate reference from wrong -----------------------------------------------------------

@pytest.mark.parametrize("name", REFERENCE)
def test_reference_answer_passes(name, request):
    task = BY_NAME[name]
    result = grade_task(task, ANSWERS / "reference" / name, _ctx(request, task))
    assert result["passed"], result["first_failure"]
    assert [c["check"] for c in result["checks"]] == [c.get("label", c["kind"]) for c in task["checks"]]


@pytest.mark.parametrize("name, variant", WRONG)
def test_known_wrong_answer_fails_at_its_check(name, variant, request):
    task = BY_NAME[name]
    folder = ANSWERS / "wrong" / name / variant
    expected = (folder / "EXPECTED_FAILURE").read_text().strip().splitlines()
    result = grade_task(task, folder, _ctx(request, task))
    failure = result["first_failure"]
    assert not result["passed"]
    assert not result["error"], failure
    assert failure["check"] == expected[0], failure
    if len(expected) > 1:
        assert expected[1] in failure["evidence"], failure


def test_empty_answers_fail_every_task(tmp_path):
    ctx = Context()
    for task in TASKS["evals"]:
        (tmp_path / task["name"]).mkdir()
        result = grade_task(task, tmp_path / task["name"], ctx)
        assert not result["passed"] and result["first_failure"]["check"] in ("interface", "rubric"), task["name"]
    missing = grade_task(TASKS["evals"][0], tmp_path / "nothing-here", ctx)
    assert missing["first_failure"]["evidence"].startswith("no answer folder")


def test_a_hanging_or_exiting_answer_is_a_failed_check_not_a_hung_grader(tmp_path):
    from skillcheck.evals.drive import run_child

    answer = tmp_path / "a"
    answer.mkdir()
    (answer / "solution.py").write_text("import sys\nsys.exit(0)\n")
    ok, evidence = run_child("slot_fix", answer)
    assert not ok and evidence == "SystemExit at solution.py:2: 0"
    (answer / "solution.py").write_text("import os\nos._exit(0)\n")
    ok, evidence = run_child("slot_fix", answer)
    assert not ok and "without a verdict" in evidence
    (answer / "solution.py").write_text("import time\ntime.sleep(60)\n")
    ok, evidence = run_child("slot_fix", answer, timeout=3)
    assert not ok and "did not finish within 3 s" in evidence


# --- eval grade (command line) ------------------------------------------------------------------------

FAST = "route-batch-delta,fix-rtm-rules,num-task-slots,explain-e2e-latency"


def _answers(tmp_path, which: dict) -> Path:
    import shutil

    root = tmp_path / "answers"
    for name, src in which.items():
        shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("EXPECTED_FAILURE"))
    return root


def test_eval_grade_reports_pass_fail_and_first_failure(tmp_path):
    names = FAST.split(",")
    which = {n: ANSWERS / "reference" / n for n in names}
    which["num-task-slots"] = ANSWERS / "wrong" / "num-task-slots" / "forgot-repartition"
    root = _answers(tmp_path, which)
    proc = run_cli("eval", "grade", str(root), "--tasks", FAST)
    assert proc.returncode == 1, proc.stderr
    assert "3 of 4 tasks pass" in proc.stdout
    report = json.loads((root / "_report" / "report.json").read_text())
    got = {t["name"]: t for t in report["tasks"]}
    assert [n for n in names if got[n]["passed"]] == ["route-batch-delta", "fix-rtm-rules", "explain-e2e-latency"]
    assert got["num-task-slots"]["first_failure"] == {
        "check": "numbers", "passed": False, "error": False,
        "evidence": "required_slots: expected 28, answer says 24"}
    md = (root / "_report" / "report.md").read_text()
    assert "| 12 | num-task-slots | numbers | FAIL | numbers | required_slots: expected 28, answer says 24 |" in md
    proc = run_cli("eval", "grade", str(root), "--tasks", "route-batch-delta,fix-rtm-rules", "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["summary"]["pass_rate"] == 1.0


@pytest.mark.parametrize("args, needle", [
    (["eval", "grade", "does/not/exist"], "not a folder of answers"),
    (["eval", "grade", ".", "--tasks", "no-such-task"], "unknown task(s): no-such-task"),
    (["eval", "grade", ".", "--evals", "README.md"], "cannot read evals"),
])
def test_eval_grade_bad_usage_is_one_line(args, needle):
    proc = run_cli(*args)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


# --- eval run (end to end with a fake assistant) ----------------------------------------------------

RUN_TASKS = "route-batch-delta,route-plain-postgres,fix-rtm-rules,num-connection-budget,explain-foreach-lag"


@pytest.mark.postgres
def test_eval_run_with_a_fake_agent_compares_with_and_without(tmp_path, pg_dsn):
    env = dict(os.environ, PG_DSN=pg_dsn, FAKE_AGENT_SKIP="explain-foreach-lag")
    agent = f"{sys.executable} {FAKE_AGENT} {{prompt_file}} {{answer_dir}}"
    out = tmp_path / "out"
    proc = run_cli("eval", "run", "--agent", agent, "--tasks", RUN_TASKS, "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "5/5 = 100%" in text and "0/5 = 0%" in text
    assert "difference: +100.0 percentage points with the skill" in text
    assert "FAIL (no streaming)" in text and "FAIL (rules)" in text and "FAIL (rubric)" in text
    summary = json.loads((out / "comparison.json").read_text())
    assert summary["with_skill"]["pass_rate"] == 1.0 and summary["without_skill"]["pass_rate"] == 0.0
    assert (out / "with_skill" / "report.md").is_file() and (out / "without_skill" / "report.json").is_file()
    assert "[eval] with_skill 1/5 route-batch-delta" in proc.stderr  # progress on stderr


def test_eval_run_without_the_assistant_installed_stops_with_a_message():
    proc = run_cli("eval", "run", "--agent", "no-such-assistant-cli -p {prompt_file} {answer_dir}", "--tasks", "num-task-slots")
    assert proc.returncode == 2
    assert "'no-such-assistant-cli' not found on PATH" in proc.stderr and "Traceback" not in proc.stderr


def test_eval_run_with_an_assistant_that_cannot_log_in_stops_with_a_message():
    env = dict(os.environ, FAKE_AGENT_FAIL="1")
    agent = f"{sys.executable} {FAKE_AGENT} {{prompt_file}} {{answer_dir}}"
    proc = run_cli("eval", "run", "--agent", agent, "--tasks", "num-task-slots", env=env)
    assert proc.returncode == 2
    assert "failed on the first task (exit 1): error: not logged in" in proc.stderr
    assert "nothing was graded" in proc.stderr


def test_eval_run_needs_both_placeholders():
    proc = run_cli("eval", "run", "--agent", "true {prompt_file}", "--tasks", "num-task-slots")
    assert proc.returncode == 2 and "must contain {prompt_file} and {answer_dir}" in proc.stderr


def test_installed_skill_has_the_pack_but_no_answers(tmp_path):
    from skillcheck.evals.run import install_skill

    target = install_skill(tmp_path, "spark-rtm-lakebase")
    assert (target / "SKILL.md").is_file() and (target / "references").is_dir()
    assert (target / "rtm_lakebase").is_dir() and not (target / "evals").exists()
    assert (tmp_path / ".agents" / "skills" / "spark-rtm-lakebase" / "SKILL.md").is_file()
