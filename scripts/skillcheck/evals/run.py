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

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .grade import ROOT, Context, grade_dir, markdown, write_reports

SKILL_HOMES = (".claude/skills", ".agents/skills", ".codex/skills")
ARMS = ("with_skill", "without_skill")
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
    if "{prompt_file}" not in template or "{answer_dir}" not in template:
        raise AgentUnavailable("--agent must contain {prompt_file} and {answer_dir}, e.g. "
                               "--agent \"mytool --prompt-file {prompt_file} --out {answer_dir}\"")
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise AgentUnavailable(f"--agent is not a valid command line: {exc}") from None
    first = words[0] if words else ""
    if first and "$" not in first and "{" not in first and shutil.which(first) is None:
        raise AgentUnavailable(f"assistant command {first!r} not found on PATH: install its command-line tool, "
                               "or pass another --agent")


def run_arm(arm: str, template: str, tasks: list[dict], base: Path, skill_name: str, timeout: float,
            log: Callable[[str], None]) -> Path:
    home = base / arm / "home"
    home.mkdir(parents=True)
    if arm == "with_skill":
        install_skill(home, skill_name)
    answers = base / arm / "answers"
    prompts = base / arm / "prompts"
    prompts.mkdir(parents=True)
    env = dict(os.environ, HOME=str(home))
    env.pop("PYTHONPATH", None)
    for k, task in enumerate(tasks, 1):
        answer_dir = answers / task["name"]
        answer_dir.mkdir(parents=True)
        prompt_file = prompts / f"{task['name']}.md"
        prompt_file.write_text(prompt_text(task, answer_dir), encoding="utf-8")
        started = time.monotonic()
        try:
            proc = subprocess.run(_fill(template, prompt_file, answer_dir), shell=True, cwd=answer_dir, env=env,
                                  capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            code, err = None, f"timed out after {timeout:.0f} s"
        (base / arm / f"{task['name']}.log").write_text(f"exit {code}\n{err}", encoding="utf-8")
        wrote = any(answer_dir.iterdir())
        log(f"{arm} {k}/{len(tasks)} {task['name']}: exit {code}, {'files written' if wrote else 'no files'}, "
            f"{time.monotonic() - started:.0f} s")
        if k == 1 and arm == ARMS[0] and code != 0 and not wrote:
            tail = (err or "").strip().splitlines()[-1:] or ["no error output"]
            raise AgentUnavailable(
                f"the assistant failed on the first task (exit {code}): {tail[0][:200]}. It must run "
                "non-interactively, be logged in through environment variables (HOME is a temporary folder) and "
                "reach its service over the network; nothing was graded.")
    return answers


def run_both(template: str, tasks: dict, only: list[str] | None, timeout: float = 900.0, keep: Path | None = None,
             out: Path | None = None, log: Callable[[str], None] = lambda _m: None) -> dict:
    check_agent(template)
    selected = [t for t in tasks["evals"] if not only or t["name"] in only]
    base = Path(tempfile.mkdtemp(prefix="rtm-evals-run-", dir=keep)) if keep else Path(tempfile.mkdtemp(prefix="rtm-evals-run-"))
    cleanup = keep is None and out is None
    try:
        answers = {arm: run_arm(arm, template, selected, base, tasks["skill_name"], timeout, log) for arm in ARMS}
        ctx = Context(log=log)
        try:
            reports = {arm: grade_dir(answers[arm], tasks, only, ctx=ctx, log=log) for arm in ARMS}
        finally:
            ctx.close()
        target = out or (base if not cleanup else None)
        if target is not None:
            for arm in ARMS:
                write_reports(reports[arm], Path(target) / arm)
        result = compare(reports)
        if target is not None:
            import json

            (Path(target) / "comparison.json").write_text(json.dumps(result["summary"], indent=2) + "\n", encoding="utf-8")
            (Path(target) / "comparison.md").write_text(result["text"] + "\n", encoding="utf-8")
            result["text"] += f"\nreports: {target}"
        return result
    finally:
        if cleanup:
            shutil.rmtree(base, ignore_errors=True)


def compare(reports: dict) -> dict:
    w, wo = reports["with_skill"], reports["without_skill"]
    by_name = {r["name"]: r for r in wo["tasks"]}
    rows = []
    for r in w["tasks"]:
        o = by_name[r["name"]]
        rows.append({"name": r["name"], "category": r["category"], "with_skill": _verdict(r), "without_skill": _verdict(o)})
    rate_w, rate_wo = w["summary"]["pass_rate"], wo["summary"]["pass_rate"]
    summary = {"tasks": len(rows), "with_skill": {"passed": w["summary"]["passed"], "pass_rate": rate_w},
               "without_skill": {"passed": wo["summary"]["passed"], "pass_rate": rate_wo},
               "difference_points": round((rate_w - rate_wo) * 100, 1), "per_task": rows}
    width = max([len(r["name"]) for r in rows] + [9])
    lines = [f"{'task':<{width}}  {'with skill':<28}  without skill", f"{'-' * width}  {'-' * 28}  {'-' * 28}"]
    for r in rows:
        lines.append(f"{r['name']:<{width}}  {r['with_skill']:<28}  {r['without_skill']}")
    rate_w_text = f"{w['summary']['passed']}/{len(rows)} = {rate_w:.0%}"
    lines.append(f"{'pass rate':<{width}}  {rate_w_text:<28}  {wo['summary']['passed']}/{len(rows)} = {rate_wo:.0%}")
    lines.append(f"difference: {summary['difference_points']:+.1f} percentage points with the skill")
    return {"summary": summary, "text": "\n".join(lines), "markdown": {arm: markdown(reports[arm]) for arm in ARMS}}


def _verdict(r: dict) -> str:
    if r["passed"]:
        return "pass"
    f = r["first_failure"] or {}
    return f"{'ERROR' if r.get('error') else 'FAIL'} ({f.get('check', '?')})"[:28]
