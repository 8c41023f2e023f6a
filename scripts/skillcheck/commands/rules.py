"""``skills.py rules``: the table of finding codes and the validator's limits."""

from __future__ import annotations

import argparse

HELP = "print the table of finding codes and the validator's limits"


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from ..codes import rules_table

    print(rules_table())
    return 0
