"""One module per ``skills.py`` subcommand: ``HELP``, ``configure(parser)``, ``run(args) -> int``.

Modules import their heavy dependencies inside ``run`` so that ``--help`` and
the other subcommands stay fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_ROOT = Path(__file__).resolve().parents[3]


class UsageError(SystemExit):
    """Exit 2 with one ``skills.py: error: ...`` line (argparse's convention)."""

    def __init__(self, message: str):
        print(f"skills.py: error: {message}", file=sys.stderr)
        super().__init__(2)


def add_root(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="pack root (default: this checkout)")


def root_of(args: argparse.Namespace) -> Path:
    """The pack root named by ``--root`` (default: this checkout), or a usage error."""
    value = getattr(args, "root", None)
    root = Path(value) if value else DEFAULT_ROOT
    if not root.is_dir():
        raise UsageError(f"--root {value!r} is not a directory")
    return root.resolve()
