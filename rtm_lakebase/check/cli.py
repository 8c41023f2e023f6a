"""The command: ``python3 -m rtm_lakebase.check [--format text|json] FILE_OR_FOLDER...``.

Text output is one ``path:line:col CODE message`` line per finding, each
followed by its ``    fix: ...`` line, then a summary line; ``--format json``
prints ``{"findings": [...], "summary": {...}}`` with each finding's fix.
Exit status: 0 no findings, 1 findings, 2 bad usage (a path that does not
exist or cannot be read, an unknown option), always as one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from rtm_lakebase.check.codes import CODES
from rtm_lakebase.check.files import UsageProblem, check_paths, with_fixes
from rtm_lakebase.check.findings import Finding, summary_line

PROG = "python3 -m rtm_lakebase.check"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse would print the whole usage first)
        raise UsageProblem(message)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Check your own .py/.ipynb/.md files with the pack's rules; "
                                            "exit 1 on findings, 2 on bad usage.")
    add_arguments(parser, nargs="*")
    parser.add_argument("--codes", action="store_true", help="list every code with its fix, and exit")
    return parser


def add_arguments(parser: argparse.ArgumentParser, nargs: str = "+") -> None:
    parser.add_argument("paths", nargs=nargs, metavar="PATH", help="files or folders (.py, .ipynb, .md)")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def report(findings: list[Finding], checked: int, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"findings": with_fixes(findings),
                           "summary": {"findings": len(findings), "files_checked": checked, "ok": not findings,
                                       "text": summary_line(findings, checked)}}, indent=2, ensure_ascii=False)
    lines = []
    for f in findings:
        lines.append(f.text())
        if f.code in CODES:
            lines.append(f"    fix: {CODES[f.code].fix}")
    lines.append(summary_line(findings, checked))
    return "\n".join(lines)


def run(paths: list[str], fmt: str = "text") -> int:
    """Check ``paths`` and print the report; the exit status (0 clean, 1 findings). Raises UsageProblem."""
    findings, checked = check_paths(paths)
    print(report(findings, checked, fmt))
    return 1 if findings else 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.codes:
            for c in CODES.values():
                print(f"{c.code}  {c.summary} -- {c.fix}")
            return 0
        if not args.paths:
            raise UsageProblem("name at least one file or folder to check")
        return run(args.paths, args.format)
    except UsageProblem as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
