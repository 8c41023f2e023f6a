"""``skills.py check PATH...``: the pack's code and prose rules on a user's .py, .ipynb and .md files."""

from __future__ import annotations

import argparse

HELP = "check your own .py/.ipynb/.md files with the pack's rules; exit 1 on findings"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders (.py, .ipynb, .md)")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run(args: argparse.Namespace) -> int:
    import json

    from ..codes import CODES
    from ..findings import summary_line
    from ..usercheck import UsageProblem, check_paths, with_fixes
    from . import UsageError

    try:
        findings, checked = check_paths(args.paths)
    except UsageProblem as exc:
        raise UsageError(str(exc)) from None
    if args.format == "json":
        print(json.dumps({"findings": with_fixes(findings),
                          "summary": {"findings": len(findings), "files_checked": checked, "ok": not findings,
                                      "text": summary_line(findings, checked)}}, indent=2, ensure_ascii=False))
    else:
        for f in findings:
            print(f.text())
            if f.code in CODES:
                print(f"    fix: {CODES[f.code].fix}")
        print(summary_line(findings, checked))
    return 1 if findings else 0
