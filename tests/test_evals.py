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

from skillcheck.evals.grade import CATEGORIES, Context, grade_task, load_tasks, prefetch_spark, spark_jobs

SCRIPT = REPO / "scripts" / "skills.py"
ANSWERS = REPO / "evals" / "answers"
FAKE_AGENT = REPO / "tests" / "eval_fixtures" / "fake_agent.py"
TRANSCRIPTS = REPO / "tests" / "eval_fixtures" / "transcripts"
TASKS = load_tasks()
BY_NAME = {t["name"]: t for t in TASKS["evals"]}


def _kinds(task):
    return {c["kind"] for c in task["checks"]} | ({"postgres"} if any(c.get("postgres") or c.get("driver") == "sink"
                                                                     for c in task["checks"]) else set())


#: Production drivers whose known-wrong answers take tens of seconds on a loaded machine (a row-at-a-time writer).
SLOW_DRIVERS = {"throughput", "latency"}


def _marks(task):
    kinds = _kinds(task)
    marks = []
    if any(c.get("driver") in SLOW_DRIVERS for c in task["checks"]) and "spark" not in kinds:
        marks.append(pytest.mark.slow)
    if "spark" in kinds:
        marks += [pytest.mark.spark, pytest.mark.slow]
    if "run" in kinds:
        marks.append(pytest.mark.postgres)
    return marks


# Spark checks of every stored answer run in one sandboxed lab session (one JVM start), verdicts cached.
_SPARK_CTX = Context()


def _all_spark_jobs() -> list:
    jobs = []
    for t in TASKS["evals"]:
        for folder in [ANSWERS / "reference" / t["name"], *sorted((ANSWERS / "unusual" / t["name"]).glob("*")),
                       *sorted((ANSWERS / "wrong" / t["name"]).glob("*"))]:
            jobs += spark_jobs(t, folder)
    return jobs


@pytest.fixture(scope="module")
def spark_verdicts():
    prefetch_spark(_SPARK_CTX, _all_spark_jobs())
    return _SPARK_CTX


def _ctx(request, task) -> Context:
    if "spark" in _kinds(task):
        return request.getfixturevalue("spark_verdicts")
    return _SPARK_CTX


REFERENCE = [pytest.param(t["name"], marks=_marks(t), id=t["name"]) for t in TASKS["evals"]]
WRONG = [pytest.param(t.name, v.name, marks=_marks(BY_NAME[t.name]), id=f"{t.name}/{v.name}")
         for t in sorted((ANSWERS / "wrong").iterdir()) for v in sorted(t.iterdir())]
UNUSUAL = [pytest.param(t.name, v.name, marks=_marks(BY_NAME[t.name]), id=f"{t.name}/{v.name}")
           for t in sorted((ANSWERS / "unusual").iterdir()) for v in sorted(t.iterdir())]


def run_cli(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


# --- the task file ----------------------------------------------------------------------------------

def test_evals_json_has_the_published_fields_and_enough_tasks():
    data = json.loads((REPO / "evals" / "evals.json").read_text())
    assert data["skill_name"] == "spark-rtm-lakebase"
    evals = data["evals"]
    assert len(evals) >= 24
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
    must = [t for t in routing if any(c["kind"] == "spark" for c in t["checks"])]
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


@pytest.mark.parametrize("name, variant", UNUSUAL)
def test_correct_but_unusual_answer_passes(name, variant, request):
    """Helpers, local variables, **kwargs dicts, other names, another design the prompt allows: all pass."""
    task = BY_NAME[name]
    folder = ANSWERS / "unusual" / name / variant
    result = grade_task(task, folder, _ctx(request, task))
    assert result["passed"], result["first_failure"]


def test_every_grader_that_runs_code_has_a_correct_but_unusual_answer():
    runs = {t["name"] for t in TASKS["evals"] if _kinds(t) & {"spark"}}
    have = {p.name for p in (ANSWERS / "unusual").iterdir()}
    assert runs - have <= {"checker-fix-query", "checker-fix-enrich", "debug-slots-error", "debug-databricks-shuffle"}


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

FAST = "route-batch-delta,num-connection-budget,num-task-slots,explain-e2e-latency"


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
    assert [n for n in names if got[n]["passed"]] == ["route-batch-delta", "num-connection-budget", "explain-e2e-latency"]
    assert got["num-task-slots"]["first_failure"] == {
        "check": "numbers", "passed": False, "error": False,
        "evidence": "required_slots: expected 28, answer says 24"}
    md = (root / "_report" / "report.md").read_text()
    assert "| 12 | num-task-slots | numbers | FAIL | numbers | required_slots: expected 28, answer says 24 |" in md
    proc = run_cli("eval", "grade", str(root), "--tasks", "route-batch-delta,num-connection-budget", "--format", "json")
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

RUN_TASKS = "route-batch-delta,route-plain-postgres,num-task-slots,num-connection-budget,explain-foreach-lag"


def test_eval_run_with_a_fake_agent_runs_trials_of_both_arms_and_compares(tmp_path):
    env = dict(os.environ, FAKE_AGENT_SKIP="explain-foreach-lag", FAKE_AGENT_NO_NOTES="num-task-slots",
               FAKE_AGENT_TRANSCRIPT=str(TRANSCRIPTS / "claude-stream.jsonl"))
    agent = f"{sys.executable} {FAKE_AGENT} {{prompt_file}} {{answer_dir}}"
    out = tmp_path / "out"
    proc = run_cli("eval", "run", "--agent", agent, "--tasks", RUN_TASKS, "--trials", "2", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    both = json.loads((out / "_report" / "comparison.json").read_text())
    assert sorted(both["conditions"]) == ["local", "search-only"]
    for condition, result in both["conditions"].items():
        rows = {t["name"]: t for t in result["per_task"]}
        assert set(rows) == set(RUN_TASKS.split(","))
        assert all(t["with_skill"] == {"passed": 2, "trials": 2, "rate": 1.0} for t in rows.values())
        assert all(t["without_skill"]["passed"] == 0 and t["difference"] == 1.0 for t in rows.values())
        assert all(t["evidence"] == "evidence" for t in rows.values()) and result["regression_guards"] == []
        assert result["paired_test"] == {"test": "McNemar exact (two-sided binomial on discordant (task, trial) pairs)",
                                         "pairs": 10, "with_skill_only": 10, "without_skill_only": 0,
                                         "p_value": round(2 / 2 ** 10, 6)}
        assert result["evidence_tasks"]["paired_test"] == result["paired_test"]
        # The fake assistant writes NOTES.md citing SKILL.md except for num-task-slots: those answers never opened it.
        assert result["skill_read"]["read"] == 8
        assert result["skill_read"]["never_opened"] == ["1/num-task-slots", "2/num-task-slots"]
        assert rows["num-task-slots"]["with_skill_answers_that_never_read_the_skill"] == 2
        # Effort: every job timed; tool calls, turns and tokens parsed from the client's stream-json output.
        for arm in ("with-skill", "without-skill"):
            e = result["effort"][arm]
            assert e["jobs"] == 10 and e["wall_seconds"]["jobs"] == 10 and e["wall_seconds"]["median"] >= 0
            assert e["tool_calls"] == {"jobs": 10, "median": 3, "total": 30}
            assert e["turns"]["median"] == 4 and e["input_tokens"]["median"] == 6000
        assert (out / "prompts" / condition / "with-skill" / "2" / "num-task-slots.md").is_file()
        assert (out / "_report" / condition / "without-skill" / "1" / "report.json").is_file()
        record = json.loads((out / "_effort" / condition / "with-skill" / "1" / "num-task-slots.json").read_text())
        assert record["client"] == "claude-code stream-json" and record["exit"] == 0
    md = (out / "_report" / "comparison.md").read_text()
    assert "## Condition `local`" in md and "## Condition `search-only`" in md
    assert "| num-task-slots | numbers | 2/2 | 0/2 | +100 pts | evidence | 2 |" in md and "p = 0.001953" in md
    assert "| tool calls | 3 (10 jobs) | 3 (10 jobs) |" in md
    assert "[eval] local with-skill trial 1 1/40 route-batch-delta" in proc.stderr  # progress on stderr
    assert "[eval] search-only with-skill trial 1 21/40 route-batch-delta" in proc.stderr


def test_eval_grade_resume_keeps_reports_of_unchanged_trials_and_regrades_changed_ones(tmp_path):
    agent = f"{sys.executable} {FAKE_AGENT} {{prompt_file}} {{answer_dir}}"
    out = tmp_path / "out"
    tasks = "num-task-slots,route-plain-postgres"
    proc = run_cli("eval", "run", "--agent", agent, "--tasks", tasks, "--trials", "2", "--out", str(out),
                   "--conditions", "local")
    assert proc.returncode == 0, proc.stderr
    # Trial 2 of the with-skill arm gets a wrong answer after its report was written: only it is graded again.
    (out / "local" / "with-skill" / "2" / "num-task-slots" / "answer.json").write_text('{"source_tasks": 1, "required_slots": 1, "workers": 1}')
    proc = run_cli("eval", "grade", str(out), "--tasks", tasks, "--resume")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("reusing") == 3 and "grading local with-skill trial 2" in proc.stderr
    rows = {t["name"]: t for t in json.loads((out / "_report" / "comparison.json").read_text())
            ["conditions"]["local"]["per_task"]}
    assert rows["num-task-slots"]["with_skill"]["passed"] == 1  # the regraded trial fails, the kept one passes
    # A report from other graders (another evals.json, grader or checker) is not reused.
    report = out / "_report" / "local" / "without-skill" / "1" / "report.json"
    data = json.loads(report.read_text())
    report.write_text(json.dumps(dict(data, grader="0" * 16)))
    proc = run_cli("eval", "grade", str(out), "--tasks", tasks, "--resume")
    assert proc.stderr.count("reusing") == 3 and "grading local without-skill trial 1" in proc.stderr
    # Without --resume every trial is graded again.
    proc = run_cli("eval", "grade", str(out), "--tasks", tasks)
    assert "reusing" not in proc.stderr and proc.stderr.count("grading ") >= 4

def test_eval_run_without_an_agent_prepares_prompt_folders_for_assistants(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("eval", "run", "--trials", "3", "--tasks", "num-task-slots,explain-e2e-latency", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    jobs = json.loads((out / "jobs.json").read_text())
    assert len(jobs) == 2 * 2 * 3 * 2  # conditions x arms x trials x tasks
    skill = out / "skill" / "spark-rtm-lakebase"
    assert (skill / "SKILL.md").is_file() and not (skill / "evals").exists()
    assert not os.access(skill / "SKILL.md", os.W_OK) or os.geteuid() == 0
    assert (skill / "SKILL.md").stat().st_mode & 0o222 == 0  # read-only
    prompts = out / "prompts"
    with_prompt = (prompts / "local" / "with-skill" / "3" / "num-task-slots.md").read_text()
    without_prompt = (prompts / "local" / "without-skill" / "3" / "num-task-slots.md").read_text()
    search_prompt = (prompts / "search-only" / "without-skill" / "3" / "num-task-slots.md").read_text()
    assert str(skill.resolve()) in with_prompt and "An agent skill is installed" in with_prompt
    assert "spark-rtm-lakebase" not in without_prompt and "An agent skill" not in without_prompt
    assert str((out / "local" / "without-skill" / "3" / "num-task-slots").resolve()) in without_prompt
    assert "pyspark 4.3.0" in with_prompt and "no PySpark, no Java, no Postgres" in search_prompt
    assert "no PySpark" not in with_prompt
    assert "NOTES.md" in with_prompt and "NOTES.md" in without_prompt
    assert "mktemp -d" in with_prompt and "mktemp -d" in without_prompt  # no fixed paths or ports between sessions
    # Answers dropped into the folders are graded by eval grade on the run folder, per condition.
    import shutil

    for arm, src in (("with-skill", ANSWERS / "reference" / "num-task-slots"),
                     ("without-skill", ANSWERS / "wrong" / "num-task-slots" / "forgot-repartition")):
        for trial in "123":
            shutil.copy(src / "answer.json", out / "local" / arm / trial / "num-task-slots" / "answer.json")
    proc = run_cli("eval", "grade", str(out), "--skill-commit", "abc1234")
    assert proc.returncode == 0, proc.stderr
    local = proc.stdout.split("## Condition `search-only`")[0]
    assert "| num-task-slots | numbers | 3/3 | 0/3 | +100 pts | evidence | 3 |" in local
    assert "| explain-e2e-latency | explanation | 0/3 | 0/3 | +0 pts | evidence | 3 |" in local
    assert "Skill graded at commit `abc1234`." in proc.stdout and "p = 0.25" in local
    assert "| num-task-slots | numbers | 0/3 | 0/3 |" in proc.stdout.split("## Condition `search-only`")[1]


def test_a_task_both_arms_always_pass_is_a_regression_guard_and_left_out_of_the_evidence():
    from skillcheck.evals.trials import compare_trials

    def report(trial, passes):
        return {"trial": trial, "tasks": [{"name": n, "category": "code", "passed": p} for n, p in passes.items()]}

    w = [report(t, {"guard": True, "helps": True, "flat": False}) for t in "123"]
    wo = [report(t, {"guard": True, "helps": t == "1", "flat": False}) for t in "123"]
    result = compare_trials({"with-skill": w, "without-skill": wo}, {})
    labels = {t["name"]: t["evidence"] for t in result["per_task"]}
    assert labels == {"guard": "regression guard", "helps": "evidence", "flat": "evidence"}
    assert result["regression_guards"] == ["guard"]
    e = result["evidence_tasks"]
    assert e["names"] == ["flat", "helps"] and e["with_skill"] == {"passed": 3, "answers": 6}
    assert e["without_skill"] == {"passed": 1, "answers": 6} and e["paired_test"]["with_skill_only"] == 2
    assert result["overall"]["with_skill_rate"] == round(6 / 9, 3)


@pytest.mark.parametrize("fixture, want", [
    ("claude-json.json", {"client": "claude-code json", "tool_calls": None, "turns": 7, "input_tokens": 48510,
                          "output_tokens": 2310, "cached_input_tokens": 47300}),
    ("claude-stream.jsonl", {"client": "claude-code stream-json", "tool_calls": 3, "turns": 4, "input_tokens": 6000,
                             "output_tokens": 852, "cached_input_tokens": 1200}),
    ("codex-exec.jsonl", {"client": "codex exec --json", "tool_calls": 4, "turns": 2, "input_tokens": 25763,
                          "output_tokens": 130, "cached_input_tokens": 24448}),
])
def test_effort_is_parsed_from_recorded_client_transcripts(fixture, want):
    from skillcheck.evals.effort import job_effort, parse_transcript

    assert parse_transcript((TRANSCRIPTS / fixture).read_text()) == want
    assert job_effort(12.34, (TRANSCRIPTS / fixture).read_text())["wall_seconds"] == 12.3
    assert parse_transcript("Wrote solution.py.\n") == {} and job_effort(1, "")["tool_calls"] is None


def test_eval_run_without_the_assistant_installed_stops_with_a_message(tmp_path):
    proc = run_cli("eval", "run", "--agent", "no-such-assistant-cli -p {prompt_file} {answer_dir}", "--tasks", "num-task-slots",
                   "--out", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert "'no-such-assistant-cli' not found on PATH" in proc.stderr and "Traceback" not in proc.stderr


def test_eval_run_with_an_assistant_that_cannot_log_in_stops_with_a_message(tmp_path):
    env = dict(os.environ, FAKE_AGENT_FAIL="1")
    agent = f"{sys.executable} {FAKE_AGENT} {{prompt_file}} {{answer_dir}}"
    proc = run_cli("eval", "run", "--agent", agent, "--tasks", "num-task-slots", "--out", str(tmp_path / "o"), env=env)
    assert proc.returncode == 2
    assert "failed on the first task (exit 1): error: not logged in" in proc.stderr
    assert "nothing was graded" in proc.stderr


def test_eval_run_needs_the_prompt_placeholder(tmp_path):
    proc = run_cli("eval", "run", "--agent", "true {answer_dir}", "--tasks", "num-task-slots", "--out", str(tmp_path / "o"))
    assert proc.returncode == 2 and "must contain {prompt_file}" in proc.stderr


def test_installed_skill_has_the_pack_but_no_answers(tmp_path):
    from skillcheck.evals.run import install_skill

    target = install_skill(tmp_path, "spark-rtm-lakebase")
    assert (target / "SKILL.md").is_file() and (target / "references").is_dir()
    assert (target / "rtm_lakebase").is_dir() and not (target / "evals").exists()
    assert (tmp_path / ".agents" / "skills" / "spark-rtm-lakebase" / "SKILL.md").is_file()


# Wrong answers the static rules already stop: the behaviour grader, run on its own, fails them too.
PAST_THE_RULES = [
    ("code-kafka-broadcast", "no-broadcast", "the static side is not broadcast: the plan joins with SortMergeJoin"),
    ("route-rtm-lakebase", "foreach-batch", "writes with foreachBatch"),
    ("fix-rtm-rules", "no-output-mode", "output mode None"),
    ("route-rtm-kafka-alerts", "one-second-trigger", "real-time mode needs at least 5 seconds"),
]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name, variant, needle", PAST_THE_RULES, ids=[f"{n}/{v}" for n, v, _ in PAST_THE_RULES])
def test_behaviour_graders_fail_wrong_answers_without_the_rules(name, variant, needle, spark_verdicts):
    from skillcheck.evals.checks import Answer
    from skillcheck.evals.grade import run_check

    task = BY_NAME[name]
    check = next(c for c in task["checks"] if c["kind"] == "spark")
    outcome = run_check(check, Answer(ANSWERS / "wrong" / name / variant), spark_verdicts)
    assert not outcome.passed and not outcome.error and needle in outcome.evidence, outcome


def test_code_patterns_skip_comments_and_docstrings_but_not_strings_the_code_passes(tmp_path):
    from skillcheck.evals.checks import Answer, absent

    spec = {"code": True, "files": ["solution.py"], "patterns": [["[\"']\\s*\\d+\\s*ms\\s*[\"']", "N ms"]]}
    (tmp_path / "solution.py").write_text(
        '"""Not "100ms": it fails (é before it on the line)."""\n'
        'x = "é"  # nor "5 ms"\n'
        'def f(q):\n    """Nor \'7ms\'."""\n    return q.trigger(processingTime="5 seconds")\n', encoding="utf-8")
    assert absent(Answer(tmp_path), spec).passed
    (tmp_path / "solution.py").write_text('x = "é"; y = "100ms"  # in code\n', encoding="utf-8")
    outcome = absent(Answer(tmp_path), spec)
    assert not outcome.passed and "'\"100ms\"'" in outcome.evidence
    (tmp_path / "solution.py").write_text('def f(:\n    return "100ms"  # does not parse: lines still read\n')
    assert not absent(Answer(tmp_path), spec).passed


def test_scope_blanking_keeps_positions_and_drops_only_comments_docstrings_and_named_functions():
    from skillcheck.evals.checks import _code_only, _without_functions

    source = ('def databricks_sink():\n    trigger(realTime="100ms")\n\n'
              'def oss_sink():\n    """Never trigger(realTime="100ms")."""\n'
              '    x = "é"  # trigger(realTime="100ms")\n    return trigger(realTime="5 seconds")\n')
    without = _without_functions(source, "databricks")
    assert "100ms" not in without.split("def oss_sink")[0]
    assert without.count("\n") == source.count("\n")
    assert without.index("def oss_sink") == source.index("def oss_sink")  # columns and lines stay
    code = _code_only(without)
    assert "100ms" not in code
    assert 'x = "é"' in code and 'return trigger(realTime="5 seconds")' in code
    assert [len(line) for line in code.splitlines()] == [len(line) for line in without.splitlines()]
    assert _without_functions("def (:\n", "x") == "def (:\n"  # unparseable: unchanged


@pytest.mark.parametrize("date, conditions, tasks", [("2026-11-25", ("local",), 28),
                                                     ("2026-11-27", ("local", "search-only"), 12)])
def test_the_committed_evidence_of_a_recorded_run_is_what_the_script_computes_from_its_reports(date, conditions,
                                                                                               tasks):
    """README's headline (generated blocks eval-evidence, eval-evidence-production) renders evidence.json;
    evidence.json is recomputed here from the committed per-trial reports and effort records, so no figure of it
    is typed by hand."""
    from skillcheck.evals.evidence import compute, markdown_block

    run = REPO / "evals" / "results" / date / "run"
    committed = json.loads((run / "_report" / "evidence.json").read_text())
    fresh = compute(run)
    assert fresh["conditions"] == committed["conditions"]
    assert tuple(fresh["conditions"]) == conditions
    for c in fresh["conditions"].values():
        assert len(c["regression_guards"]) + c["evidence_tasks"]["tasks"] == len(c["tasks"]) == tasks
        assert all(t["evidence"] == "regression guard" for t in c["tasks"] if t["name"] in c["regression_guards"])
        assert all(t["with_skill"] == t["without_skill"] == t["trials"] for t in c["tasks"]
                   if t["evidence"] == "regression guard")
        assert all(t["trials"] == 3 for t in c["tasks"])
    assert markdown_block(committed).strip() in (REPO / "README.md").read_text()


def test_the_checkpoint_switch_prompt_states_the_slots_and_partitions_the_grader_runs_with():
    """The switch needs source + shuffle partitions free slots at once; the shuffle count is fixed by the first run.
    The 2026-11-27 run's prompt did not say how many slots, and answers sizing 4 or 8 shuffle partitions for an
    unknown cluster failed on the grader's 4: the prompt now gives the grader's own figures."""
    from skillcheck.evals import drive

    prompt = BY_NAME["prod-checkpoint-switch"]["prompt"]
    assert f"runs with {drive.LAB_CORES} task slots" in prompt
    assert "in 2 partitions" in prompt and "num_partitions=2" in (REPO / "scripts" / "skillcheck" / "evals" /
                                                                   "prod.py").read_text()


def test_the_evidence_of_a_run_reports_effort_per_condition_and_arm(tmp_path):
    """evidence.json (and the README block rendered from it) carries each arm's median effort per condition, from
    the run's _effort records; a run without records has no effort entry (the 2026-11-25 run)."""
    import shutil

    from skillcheck.evals.evidence import compute, markdown_block

    run = tmp_path / "run"
    for arm, src, wall, calls in (("with-skill", ANSWERS / "reference" / "num-task-slots", 30, 4),
                                  ("without-skill", ANSWERS / "wrong" / "num-task-slots" / "forgot-repartition", 90, 12)):
        for trial in ("1", "2"):
            shutil.copytree(src, run / "search-only" / arm / trial / "num-task-slots",
                            ignore=shutil.ignore_patterns("EXPECTED_FAILURE"))
            record = run / "_effort" / "search-only" / arm / trial / "num-task-slots.json"
            record.parent.mkdir(parents=True)
            record.write_text(json.dumps({"wall_seconds": wall * int(trial), "tool_calls": calls,
                                          "client": "session (self-reported)"}))
    proc = run_cli("eval", "grade", str(run))
    assert proc.returncode == 0, proc.stderr
    c = compute(run)["conditions"]["search-only"]
    assert c["effort"]["with-skill"]["wall_seconds"] == {"jobs": 2, "median": 45, "total": 90}
    assert c["effort"]["without-skill"]["tool_calls"]["median"] == 12
    assert c["effort"]["clients"] == ["session (self-reported)"]
    block = markdown_block(compute(run))
    assert ("with the skill 45 s and 4 tool calls (2 answers), without it 135 s and 12 tool calls (2 answers)"
            in block), block
    for arm in ("with-skill", "without-skill"):
        shutil.rmtree(run / "_effort" / "search-only" / arm)
    assert "effort" not in compute(run)["conditions"]["search-only"]


def test_a_run_folder_without_conditions_is_graded_as_the_local_condition(tmp_path):
    """The 2026-11-25 layout (RUN/<arm>/<trial>/<task>/) still grades; its comparison is condition local."""
    import shutil

    run = tmp_path / "run"
    for arm, src in (("with-skill", ANSWERS / "reference" / "num-task-slots"),
                     ("without-skill", ANSWERS / "wrong" / "num-task-slots" / "forgot-repartition")):
        shutil.copytree(src, run / arm / "1" / "num-task-slots", ignore=shutil.ignore_patterns("EXPECTED_FAILURE"))
    effort = run / "_effort" / "with-skill" / "1" / "num-task-slots.json"
    effort.parent.mkdir(parents=True)
    effort.write_text('{"wall_seconds": 42, "tool_calls": 5, "client": "session (self-reported)"}')
    proc = run_cli("eval", "grade", str(run))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((run / "_report" / "comparison.json").read_text())["conditions"]["local"]
    assert result["per_task"][0]["with_skill"]["passed"] == 1 and result["per_task"][0]["evidence"] == "evidence"
    assert result["effort"]["with-skill"]["wall_seconds"] == {"jobs": 1, "median": 42, "total": 42}
    assert result["effort"]["without-skill"]["jobs"] == 0
    assert (run / "_report" / "with-skill" / "1" / "report.json").is_file()


def test_the_recorded_calibration_of_the_measuring_graders_separates_reference_from_wrong():
    """evals/results/calibration/measuring-graders.json (skills.py eval calibrate): the bounds were chosen from
    it; every reference and unusual answer passed and every known-wrong one failed at the measuring check."""
    data = json.loads((REPO / "evals" / "results" / "calibration" / "measuring-graders.json").read_text())
    assert set(data["tasks"]) == {"prod-throughput-floor", "prod-rtm-latency-p99"}
    for name, variants in data["tasks"].items():
        labels = {c.get("label", c["kind"]) for c in BY_NAME[name]["checks"]}
        for label, v in variants.items():
            assert v["check"] in labels and v["measured"], (name, label, v)
            assert v["passed"] is (not label.startswith("wrong/")), (name, label, v)
