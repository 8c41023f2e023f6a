"""``eval run``: run an assistant on every task with the skill installed and without it, grade both, compare.

The assistant is any non-interactive command line with ``{prompt_file}`` and
``{answer_dir}`` in it. Each run gets a fresh temporary ``HOME``: for the
"with skill" arm the skill is installed there the way assistants discover
skills (``~/.claude/skills/NAME``, ``~/.agents/skills/NAME``,
``~/.codex/skills/NAME``); for the "without" arm the home is empty. The
command runs with the answer folder as its working directory. What is
installed is what ``skills.py package`` builds (what users install), so the
pack's evals/ folder (reference answers) is never part of it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .grade import ROOT, Context, grade_dir, grader_fingerprint, write_reports

SKILL_HOMES = (".claude/skills", ".agents/skills", ".codex/skills")
from .trials import ARMS, CONDITIONS

_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


class AgentUnavailable(Exception):
    """The assistant command cannot run here (not installed, not logged in, no network): stop with a message."""


def install_skill(home: Path, name: str) -> Path:
    """Install the skill as users get it: the folder ``skills.py package`` builds, under each skills home."""
    from ..package import build_package

    target = home / SKILL_HOMES[0] / name
    with tempfile.TemporaryDirectory(prefix="rtm-evals-pkg-") as tmp:
        folder, _zip = build_package(ROOT, Path(tmp))
        target.parent.mkdir(parents=True)
        shutil.copytree(folder, target, symlinks=False)
    for other in SKILL_HOMES[1:]:
        (home / other).mkdir(parents=True)
        (home / other / name).symlink_to(target, target_is_directory=True)
    return target


def prompt_text(task: dict, answer_dir: Path) -> str:
    parts = [task["prompt"], "",
             f"Write the files of your answer into the folder {answer_dir} (your current directory), named exactly "
             f"as the interface says: {task['interface']}. Do not ask questions; work without further input."]
    for rel in task.get("files", []):
        path = ROOT / rel
        try:
            body = path.read_text(encoding="utf-8")
        except OSError:
            continue
        parts += ["", f"The file {rel}:", "", "```python" if rel.endswith(".py") else "```", body.rstrip(), "```"]
    return "\n".join(parts) + "\n"


def _fill(template: str, prompt_file: Path, answer_dir: Path) -> str:
    def q(p: Path) -> str:
        s = str(p)
        return s if _SAFE_PATH.match(s) else shlex.quote(s)

    return template.replace("{prompt_file}", q(prompt_file)).replace("{answer_dir}", q(answer_dir))


def check_agent(template: str) -> None:
    if "{prompt_file}" not in template:  # {answer_dir} is optional: the command runs in the answer folder
        raise AgentUnavailable("--agent must contain {prompt_file} (and may contain {answer_dir}; it runs in the "
                               "answer folder), e.g. --agent \"mytool --prompt-file {prompt_file} --out {answer_dir}\"")
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise AgentUnavailable(f"--agent is not a valid command line: {exc}") from None
    first = words[0] if words else ""
    if first and "$" not in first and "{" not in first and shutil.which(first) is None:
        raise AgentUnavailable(f"assistant command {first!r} not found on PATH: install its command-line tool, "
                               "or pass another --agent")


NOTES = ("When you are done, write NOTES.md in the same folder: the files, pages and searches you consulted, "
         "one per line (paths as you opened them).")
SHARED_MACHINE = ("Other sessions share this machine: if you start a server to try your answer (a throwaway "
                  "Postgres, Spark), give it a folder of its own (mktemp -d) and a free port, never a fixed path "
                  "or port, and stop it when you are done.")


def arm_prompt(task: dict, answer_dir: Path, arm: str, skill_dir: Path | None, condition: str = "local") -> str:
    text = prompt_text(task, answer_dir) + "\n" + CONDITIONS[condition] + "\n"
    if arm == ARMS[0] and skill_dir is not None:
        text += (f"\nAn agent skill is installed at {skill_dir} (read-only): its SKILL.md says when it applies "
                 "and what to read.\n")
    return text + "\n" + SHARED_MACHINE + "\n\n" + NOTES + "\n"


def prepare(out: Path, tasks: list[dict], trials: int, skill_name: str,
            conditions: tuple[str, ...] = tuple(CONDITIONS)) -> dict:
    """Write the run folder: the packaged skill, one prompt per (condition, arm, trial, task), empty answer folders."""
    from ..package import build_package

    skill_dir = out / "skill" / skill_name
    if not skill_dir.exists():
        with tempfile.TemporaryDirectory(prefix="rtm-evals-pkg-") as tmp:
            folder, _zip = build_package(ROOT, Path(tmp))
            shutil.copytree(folder, skill_dir, symlinks=False)
        for p in [skill_dir, *skill_dir.rglob("*")]:  # read-only for the assistant
            p.chmod(0o555 if p.is_dir() else 0o444)
    jobs = []
    for condition in conditions:
        for arm in ARMS:
            for trial in range(1, trials + 1):
                for task in tasks:
                    answer_dir = (out / condition / arm / str(trial) / task["name"]).resolve()
                    answer_dir.mkdir(parents=True, exist_ok=True)
                    prompt_file = out / "prompts" / condition / arm / str(trial) / f"{task['name']}.md"
                    prompt_file.parent.mkdir(parents=True, exist_ok=True)
                    prompt_file.write_text(arm_prompt(task, answer_dir, arm, skill_dir.resolve(), condition),
                                           encoding="utf-8")
                    jobs.append({"condition": condition, "arm": arm, "trial": trial, "task": task["name"],
                                 "prompt": str(prompt_file), "answer_dir": str(answer_dir)})
    (out / "jobs.json").write_text(json.dumps(jobs, indent=1) + "\n", encoding="utf-8")
    return {"skill_dir": skill_dir, "jobs": jobs}


#: Tools the ``search-only`` condition takes away from an assistant run by ``eval run --agent`` (shims on PATH
#: that fail with a message); ``python``/``python3`` become the base interpreter without site-packages.
SEARCH_ONLY_BLOCKED = ("java", "javac", "spark-submit", "pyspark", "spark-shell", "initdb", "pg_ctl", "postgres",
                       "psql", "pg_ctlcluster", "docker", "podman")


def condition_env(condition: str, base: dict[str, str], shims: Path) -> dict[str, str]:
    """The environment of an assistant in ``condition``: ``search-only`` drops the Spark, Java and Postgres
    variables and puts shims first on PATH (best effort: a client may still find a binary by its full path)."""
    env = dict(base)
    if condition != "search-only":
        return env
    for key in ("JAVA_HOME", "SPARK_HOME", "PG_BIN", "PG_DSN", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(key, None)
    if not shims.is_dir():
        shims.mkdir(parents=True)
        for name in SEARCH_ONLY_BLOCKED:
            (shims / name).write_text(f"#!/bin/sh\necho '{name}: not available in the search-only condition' >&2\n"
                                      "exit 127\n", encoding="utf-8")
        import sys

        base_python = Path(sys.base_prefix) / "bin" / "python3"
        for name in ("python", "python3"):
            (shims / name).write_text(f'#!/bin/sh\nexec "{base_python}" -s "$@"\n', encoding="utf-8")
        for f in shims.iterdir():
            f.chmod(0o755)
    env["PATH"] = os.pathsep.join((str(shims), *(p for p in env.get("PATH", "").split(os.pathsep)
                                                  if "/.venv/" not in p + "/")))
    return env


def run_agent(template: str, job: dict, home: Path, timeout: float, env: dict[str, str] | None = None
              ) -> tuple[int | None, str, str]:
    """Run one job: ``(exit code or None on timeout, stderr, stdout)``."""
    env = dict(env if env is not None else os.environ, HOME=str(home))
    env.pop("PYTHONPATH", None)
    answer_dir, prompt_file = Path(job["answer_dir"]), Path(job["prompt"])
    try:
        proc = subprocess.run(_fill(template, prompt_file, answer_dir), shell=True, cwd=answer_dir, env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        return proc.returncode, proc.stderr, proc.stdout
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, f"timed out after {timeout:.0f} s", out


def run_trials(template: str | None, tasks: dict, only: list[str] | None, trials: int, out: Path,
               timeout: float = 900.0, log: Callable[[str], None] = lambda _m: None,
               conditions: tuple[str, ...] = tuple(CONDITIONS)) -> dict:
    """Prepare the run folder; with an assistant command, run every job (timed, its output kept for the effort
    figures) and grade both arms in every condition."""
    from .effort import effort_file, job_effort

    if template is not None:
        check_agent(template)
    selected = [t for t in tasks["evals"] if not only or t["name"] in only]
    out.mkdir(parents=True, exist_ok=True)
    prep = prepare(out, selected, trials, tasks["skill_name"], conditions)
    if template is None:
        return {"prepared": True, "out": str(out), "jobs": len(prep["jobs"]), "skill_dir": str(prep["skill_dir"]),
                "conditions": list(conditions)}
    homes = {}
    for arm in ARMS:
        home = out / "_homes" / arm
        if not home.exists():
            home.mkdir(parents=True)
            if arm == ARMS[0]:
                for sub in SKILL_HOMES:
                    (home / sub).mkdir(parents=True)
                    (home / sub / tasks["skill_name"]).symlink_to(prep["skill_dir"].resolve(), target_is_directory=True)
        homes[arm] = home
    for k, job in enumerate(prep["jobs"], 1):
        started = time.monotonic()
        env = condition_env(job["condition"], dict(os.environ), out / "_shims" / job["condition"])
        code, err, stdout = run_agent(template, job, homes[job["arm"]], timeout, env)
        seconds = time.monotonic() - started
        rel = Path(job["condition"]) / job["arm"] / str(job["trial"])
        logfile = out / "_logs" / rel / f"{job['task']}.log"
        logfile.parent.mkdir(parents=True, exist_ok=True)
        logfile.write_text(f"exit {code}\n{err}", encoding="utf-8")
        (out / "_logs" / rel / f"{job['task']}.stdout").write_text(stdout, encoding="utf-8")
        record = dict(job_effort(seconds, stdout), exit=code)
        efile = effort_file(out, job["condition"], job["arm"], str(job["trial"]), job["task"])
        efile.parent.mkdir(parents=True, exist_ok=True)
        efile.write_text(json.dumps(record) + "\n", encoding="utf-8")
        wrote = any(Path(job["answer_dir"]).iterdir())
        log(f"{job['condition']} {job['arm']} trial {job['trial']} {k}/{len(prep['jobs'])} {job['task']}: "
            f"exit {code}, {'files written' if wrote else 'no files'}, {seconds:.0f} s")
        if k == 1 and code != 0 and not wrote:
            tail = (err or "").strip().splitlines()[-1:] or ["no error output"]
            raise AgentUnavailable(
                f"the assistant failed on the first task (exit {code}): {tail[0][:200]}. It must run "
                "non-interactively, be logged in through environment variables (HOME is a temporary folder) and "
                "reach its service over the network; nothing was graded.")
    return grade_run(out, tasks, only, log=log)


def _reusable_report(report_dir: Path, trial_dir: Path, only: list[str], grader: str) -> dict | None:
    """A trial's earlier report, if the same graders graded the same tasks and no answer file changed since."""
    path = report_dir / "report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return None
    if sorted(t.get("name") for t in report.get("tasks", [])) != sorted(only) or report.get("grader") != grader:
        return None
    newest = max((f.stat().st_mtime for f in trial_dir.rglob("*") if f.is_file()), default=0.0)
    return report if newest < written else None


def grade_run(folder: Path, tasks: dict, only: list[str] | None = None, log: Callable[[str], None] = lambda _m: None,
              skill_commit: str | None = None, resume: bool = False) -> dict:
    """Grade every ``[<condition>/]<arm>/<trial>/`` folder; write per-trial reports and, per condition, the
    comparison (JSON + Markdown): ``{"conditions": {condition: comparison}}``.

    ``resume``: a trial whose report is newer than all its answer files and covers the same tasks is not
    graded again (a long run graded trial by trial as the assistants finish).
    """
    from .effort import read_effort
    from .trials import ARMS as T_ARMS
    from .trials import LEGACY_CONDITION, compare_trials, condition_folders, skill_read, trial_folders, write_comparison

    results: dict[str, dict] = {}
    ctx = Context(log=log)
    try:
        for condition, cfolder in condition_folders(folder).items():
            reports: dict[str, list[dict]] = {}
            read: dict[str, dict] = {}
            names = only
            if names is None:  # the tasks the run folder holds answer folders for
                present = {p.name for dirs in trial_folders(cfolder).values() for d in dirs for p in d.iterdir()
                           if p.is_dir()}
                names = [t["name"] for t in tasks["evals"] if t["name"] in present]
            report_base = folder / "_report" / condition if condition else folder / "_report"
            label = f"{condition} " if condition else ""
            for arm, trial_dirs in trial_folders(cfolder).items():
                reports[arm] = []
                for tdir in trial_dirs:
                    report_dir = report_base / arm / tdir.name
                    r = _reusable_report(report_dir, tdir, names, grader_fingerprint(tasks)) if resume else None
                    if r is not None:
                        log(f"{label}{arm} trial {tdir.name}: reusing {report_dir / 'report.json'} (no answer changed since)")
                        r["trial"] = tdir.name  # a report written by `eval grade <trial folder> --out <report_dir>`
                    else:
                        log(f"grading {label}{arm} trial {tdir.name}")
                        r = grade_dir(tdir, tasks, names, ctx=ctx, log=log)
                        r["trial"] = tdir.name
                        write_reports(r, report_dir)
                    reports[arm].append(r)
                    if arm == T_ARMS[0]:
                        read[arm] = read.get(arm, {})
                        for t in r["tasks"]:
                            read[arm][(t["name"], tdir.name)] = skill_read(tdir / t["name"])
            effort = {arm: read_effort(folder, condition, arm) for arm in T_ARMS}
            results[condition or LEGACY_CONDITION] = compare_trials(reports, read, effort)
    finally:
        ctx.close()
    combined = {"conditions": results}
    j, m = write_comparison(combined, folder / "_report", skill_commit)
    combined["files"] = [str(j), str(m)]
    return combined
