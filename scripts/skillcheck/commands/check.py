"""``skills.py check PATH...``: the checker that ships with the skill (``python3 -m rtm_lakebase.check``), run from here."""

from __future__ import annotations

import argparse

HELP = "check your own .py/.ipynb/.md files with the pack's rules; exit 1 on findings"


def configure(parser: argparse.ArgumentParser) -> None:
    from rtm_lakebase.check.cli import add_arguments

    add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from rtm_lakebase.check.cli import run as check
    from rtm_lakebase.check.files import UsageProblem

    from . import UsageError

    try:
        return check(args.paths, args.format)
    except UsageProblem as exc:
        raise UsageError(str(exc)) from None
