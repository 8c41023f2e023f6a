"""``skills.py eval grade DIR`` and ``skills.py eval run --agent "COMMAND {prompt_file} {answer_dir}"``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "grade eval answers (eval grade DIR), or run an assistant with and without the skill (eval run --agent ...)"


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="eval_command", required=True, metavar="{grade,run,evidence,calibrate}")
    g = sub.add_parser("grade", help="grade a folder of answers (DIR/<task name>/) against evals/evals.json")
    g.add_argument("dir", help="folder holding one sub-folder per task, or a run folder "
                                "[<condition>/]<arm>/<trial>/<task>/")
    g.add_argument("--skill-commit", help="the commit of the skill the answers were made with (written into the comparison)")
    g.add_argument("--resume", action="store_true",
                   help="run folder: keep a trial's report when no answer file changed since it was written")
    _common(g)
    r = sub.add_parser("run", help="write prompt folders for both arms and N trials; with --agent also run it and grade")
    r.add_argument("--agent",
                   help='command line with {prompt_file} and {answer_dir}, e.g. "claude -p --dangerously-skip-permissions '
                        '\\"$(cat {prompt_file})\\""; it runs with HOME set to a temporary home and the answer folder as cwd')
    r.add_argument("--timeout", type=float, default=900.0, help="seconds per task and agent run (default 900)")
    r.add_argument("--trials", type=int, default=1, help="trials per arm and task (default 1)")
    r.add_argument("--conditions", default="local,search-only",
                   help="what the assistant has: local (PySpark + Postgres), search-only (search and a plain "
                        "Python); comma-separated (default: both)")
    _common(r)
    e = sub.add_parser("evidence", help="label a graded run's tasks (evidence or regression guard) and write "
                                        "RUN/_report/evidence.json from its per-trial reports")
    e.add_argument("dir", help="a graded run folder (RUN/_report/[<condition>/]<arm>/<trial>/report.json)")
    c = sub.add_parser("calibrate", help="grade the reference and known-wrong answers of the measuring tasks and "
                                         "record what each grader measured (JSON)")
    _common(c)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", help="comma-separated task names (default: all)")
    p.add_argument("--out", help="grade: folder for the reports (default DIR/_report); run: the run folder (required)")
    p.add_argument("--evals", help="evals.json to use (default: evals/evals.json)")
    p.add_argument("--format", choices=("text", "json"), default="text")


def _log(msg: str) -> None:
    print(f"[eval] {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    import json

    from ..evals.grade import EVALS_FILE, EvalsFileError, load_tasks
    from . import UsageError

    if args.eval_command == "evidence":
        from ..evals.evidence import markdown_block, write

        if not (Path(args.dir) / "_report").is_dir():
            raise UsageError(f"{args.dir}: not a graded run folder (no _report/)")
        path = write(Path(args.dir))
        print(markdown_block(json.loads(path.read_text(encoding="utf-8"))) + f"\nwritten: {path}")
        return 0

    try:
        tasks = load_tasks(Path(args.evals) if args.evals else EVALS_FILE)
    except EvalsFileError as exc:
        raise UsageError(str(exc)) from None
    only = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    if only:
        unknown = sorted(set(only) - {t["name"] for t in tasks["evals"]})
        if unknown:
            raise UsageError(f"unknown task(s): {', '.join(unknown)}")

    if args.eval_command == "calibrate":
        from ..evals.calibrate import MEASURING, write

        if not args.out:
            raise UsageError("eval calibrate needs --out FILE (the JSON to write)")
        data = write(tasks, only or list(MEASURING), Path(args.out), log=_log)
        print(json.dumps(data, indent=2) if args.format == "json" else f"written: {args.out}")
        return 0

    if args.eval_command == "grade":
        from ..evals.grade import grade_dir, markdown, write_reports
        from ..evals.run import grade_run
        from ..evals.trials import condition_folders, markdown_table

        folder = Path(args.dir)
        if not folder.is_dir():
            raise UsageError(f"{args.dir}: not a folder of answers")
        if condition_folders(folder):
            result = grade_run(folder, tasks, only, log=_log, skill_commit=args.skill_commit, resume=args.resume)
            print(json.dumps(result, indent=2) if args.format == "json" else
                  markdown_table(result, args.skill_commit) + f"\nreports: {' '.join(result['files'])}")
            return 0
        report = grade_dir(folder, tasks, only, log=_log)
        j, m = write_reports(report, Path(args.out) if args.out else folder / "_report")
        print(json.dumps(report, indent=2) if args.format == "json" else markdown(report) + f"\nreports: {j} {m}")
        return 0 if report["summary"]["passed"] == report["summary"]["tasks"] else 1

    from ..evals.run import AgentUnavailable, run_trials
    from ..evals.trials import CONDITIONS, markdown_table

    conditions = tuple(c.strip() for c in args.conditions.split(",") if c.strip())
    if not conditions or set(conditions) - set(CONDITIONS):
        raise UsageError(f"--conditions: each one of {', '.join(CONDITIONS)}")
    if not args.out:
        raise UsageError("eval run needs --out DIR (the run folder: skill, prompts, answers, reports)")
    if args.trials < 1:
        raise UsageError("--trials must be at least 1")
    try:
        result = run_trials(args.agent, tasks, only, args.trials, Path(args.out), timeout=args.timeout, log=_log,
                             conditions=conditions)
    except AgentUnavailable as exc:
        print(f"skills.py eval run: {exc}", file=sys.stderr)
        return 2
    if result.get("prepared"):
        print(f"prepared {result['jobs']} prompts in {result['out']}/prompts/<condition>/<arm>/<trial>/<task>.md "
              f"(conditions: {', '.join(result['conditions'])}); answers go to "
              f"{result['out']}/<condition>/<arm>/<trial>/<task>/; the packaged skill is {result['skill_dir']}.\n"
              f"Then: scripts/skills.py eval grade {result['out']}")
        return 0
    print(json.dumps(result, indent=2) if args.format == "json" else markdown_table(result))
    return 0
