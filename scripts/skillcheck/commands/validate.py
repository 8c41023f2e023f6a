"""``skills.py validate``: every check on the pack; exit 1 on findings."""

from __future__ import annotations

import argparse

from . import add_root, root_of

HELP = "check the pack; exit 1 on findings"


def configure(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--no-external", action="store_true", help="skip markdownlint and mkdocs")


def run(args: argparse.Namespace) -> int:
    from rtm_lakebase.check.findings import render

    from ..validate import validate_pack

    findings, checked = validate_pack(root_of(args), external=not args.no_external)
    print(render(findings, checked, args.format))
    return 1 if findings else 0
