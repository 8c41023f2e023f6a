"""Grade a folder of answers (``DIR/<task name>/``) against evals/evals.json; write JSON and Markdown reports.

Each task lists its checks in order; a task passes when all pass, and its
report names the first failing check with its evidence. Check kinds:
static ones (:mod:`checks`), ``run`` (a sandboxed child-process driver, with a
throwaway Postgres inside the sandbox where needed) and ``spark`` (the task's
query shape and rows on a sandboxed local real-time lab, many answers per session).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from .checks import STATIC, Answer, Outcome

ROOT = Path(__file__).resolve().parents[3]
EVALS_FILE = ROOT / "evals" / "evals.json"
CATEGORIES = ("routing", "code", "numbers", "explanation", "production", "platform")


class EvalsFileError(Exception):
    pass


def load_tasks(path: Path = EVALS_FILE) -> dict:
    """evals.json, checked: the published fields (skill_name; evals[].id/prompt/expected_output/files/assertions)
    and this pack's (name, category, interface, checks with known kinds)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalsFileError(f"{path}: cannot read evals: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("evals"), list) or not isinstance(data.get("skill_name"), str):
        raise EvalsFileError(f"{path}: needs skill_name and an evals list")
    ids, names = set(), set()
    for t in data["evals"]:
        for key, kind in (("id", int), ("name", str), ("category", str), ("prompt", str), ("expected_output", str),
                          ("files", list), ("assertions", list), ("interface", str), ("checks", list)):
            if not isinstance(t.get(key), kind):
                raise EvalsFileError(f"{path}: task {t.get('id')!r} field {key!r} missing or not {kind.__name__}")
        if t["id"] in ids or t["name"] in names:
            raise EvalsFileError(f"{path}: duplicate task id or name {t['id']} {t['name']}")
        if t["category"] not in CATEGORIES:
            raise EvalsFileError(f"{path}: task {t['name']}: category must be one of {CATEGORIES}")
        for c in t["checks"]:
            if c.get("kind") not in (*STATIC, "run", "spark"):
                raise EvalsFileError(f"{path}: task {t['name']}: unknown check kind {c.get('kind')!r}")
        ids.add(t["id"])
        names.add(t["name"])
    return data


@dataclass
class Context:
    """Shared resources of one grading run: created on first use, closed at the end."""

    log: Callable[[str], None] = lambda _m: None
    spark_results: dict = field(default_factory=dict)  # (driver, answer folder) -> (passed, evidence), prefetched
    _stack: ExitStack = field(default_factory=ExitStack)
    _tmp: Path | None = None

    def workdir(self) -> Path:
        if self._tmp is None:
            self._tmp = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="rtm-evals-")))
        return Path(tempfile.mkdtemp(dir=self._tmp))

    def close(self) -> None:
        self._stack.close()


def run_check(check: dict, answer: Answer, ctx: Context) -> Outcome:
    kind = check["kind"]
    label = check.get("label", kind)
    try:
        if kind in STATIC:
            out = STATIC[kind](answer, check)
            return Outcome(label, out.passed, out.evidence)
        if kind in ("run", "spark"):
            # Every check that executes the answer runs it sandboxed in a child (drive.run_child); a Spark check
            # starts its own local lab session there (about 10 s), so no answer shares the grader's process.
            from .drive import run_child
            from .sandbox import SandboxUnavailable

            try:
                key = (check["driver"], str(answer.folder.resolve()))
                if kind == "spark" and key not in ctx.spark_results:
                    prefetch_spark(ctx, [(check["driver"], answer.folder)])
                if kind == "spark":
                    ok, evidence = ctx.spark_results[key]
                else:
                    ok, evidence = run_child(check["driver"], answer.folder, timeout=float(check.get("timeout", 240)))
            except SandboxUnavailable as exc:
                return Outcome(label, False, f"grader error (answer not judged): {exc}", error=True)
            return Outcome(label, ok, evidence)
    except Exception as exc:  # an answer's code raising inside an in-process driver is a failed check
        from .drive import GraderUnavailable

        if isinstance(exc, GraderUnavailable) or type(exc).__name__ in ("PostgresUnavailable", "RealTimeModeUnavailable"):
            return Outcome(label, False, f"grader error (answer not judged): {str(exc)[:300]}", error=True)
        return Outcome(label, False, f"{type(exc).__name__}: {str(exc)[:300]}")
    return Outcome(label, False, f"unknown check kind {kind}")


def prefetch_spark(ctx: Context, jobs: list[tuple[str, Path]]) -> None:
    """Run these Spark checks in one sandboxed lab session and keep their verdicts for :func:`run_check`."""
    from .drive import run_spark_batch

    todo = [(d, f) for d, f in dict.fromkeys((d, Path(f)) for d, f in jobs) if (d, str(f.resolve())) not in ctx.spark_results]
    if todo:
        for (d, f), verdict in zip(todo, run_spark_batch(todo, log=ctx.log), strict=True):
            ctx.spark_results[(d, str(f.resolve()))] = verdict


def spark_jobs(task: dict, answer_dir: Path) -> list[tuple[str, Path]]:
    """The Spark checks of a task worth running for this answer (its interface check passes)."""
    checks = [c for c in task["checks"] if c["kind"] == "spark"]
    if not checks or not answer_dir.is_dir():
        return []
    first = task["checks"][0]
    if first["kind"] == "interface" and not STATIC["interface"](Answer(answer_dir), first).passed:
        return []
    return [(c["driver"], answer_dir) for c in checks]


def grade_task(task: dict, answer_dir: Path, ctx: Context) -> dict:
    answer = Answer(answer_dir)
    started = time.monotonic()
    outcomes: list[Outcome] = []
    if not answer_dir.is_dir():
        outcomes.append(Outcome("answer", False, f"no answer folder {answer_dir.name}/"))
    else:
        for check in task["checks"]:
            o = run_check(check, answer, ctx)
            outcomes.append(o)
            if not o.passed:
                break
    failed = next((o for o in outcomes if not o.passed), None)
    return {"id": task["id"], "name": task["name"], "category": task["category"], "passed": failed is None,
            "error": bool(failed and failed.error),
            "first_failure": failed.as_dict() if failed else None, "checks": [o.as_dict() for o in outcomes],
            "seconds": round(time.monotonic() - started, 1)}


def grader_fingerprint(tasks: dict) -> str:
    """What the grading depends on: the tasks, the graders' code, and the pack code they call (checker, calculators)."""
    import hashlib

    root = Path(__file__).resolve().parents[3]
    h = hashlib.sha256(json.dumps(tasks, sort_keys=True).encode())
    for folder in (Path(__file__).parent, root / "rtm_lakebase" / "check", root / "rtm_lakebase" / "calc"):
        for f in sorted(folder.rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def grade_dir(folder: Path, tasks: dict, only: list[str] | None = None, ctx: Context | None = None,
              log: Callable[[str], None] = lambda _m: None) -> dict:
    own = ctx is None
    ctx = ctx or Context(log=log)
    results = []
    try:
        selected = [t for t in tasks["evals"] if not only or t["name"] in only]
        jobs = [j for t in selected for j in spark_jobs(t, folder / t["name"])]
        if jobs:
            try:
                prefetch_spark(ctx, jobs)
            except Exception as exc:  # no sandbox / no Spark: each task reports it as a grader error
                log(f"Spark checks not prefetched: {str(exc)[:200]}")
        for task in tasks["evals"]:
            if only and task["name"] not in only:
                continue
            log(f"grading {task['name']} ...")
            results.append(grade_task(task, folder / task["name"], ctx))
    finally:
        if own:
            ctx.close()
    passed = sum(r["passed"] for r in results)
    return {"skill_name": tasks["skill_name"], "answers": str(folder), "grader": grader_fingerprint(tasks),
            "tasks": results,
            "summary": {"tasks": len(results), "passed": passed, "errors": sum(r["error"] for r in results),
                        "pass_rate": round(passed / len(results), 3) if results else 0.0}}


def markdown(report: dict) -> str:
    s = report["summary"]
    lines = [f"# Eval report: {report['skill_name']}", "",
             f"{s['passed']} of {s['tasks']} tasks pass (pass rate {s['pass_rate']:.0%}); answers from `{report['answers']}`.",
             "", "| id | task | category | result | first failing check | evidence |", "| ---: | --- | --- | --- | --- | --- |"]
    for r in report["tasks"]:
        f = r["first_failure"]
        ev = (f["evidence"] if f else "").replace("|", "\\|").replace("\n", " ")[:200]
        verdict = "pass" if r["passed"] else ("ERROR" if r.get("error") else "FAIL")
        lines.append(f"| {r['id']} | {r['name']} | {r['category']} | {verdict} | "
                     f"{f['check'] if f else ''} | {ev} |")
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "report.json", out / "report.md"
    j.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    m.write_text(markdown(report), encoding="utf-8")
    return j, m


def env_summary() -> str:
    return f"PG_DSN {'set' if os.environ.get('PG_DSN') else 'not set (throwaway server)'}"
