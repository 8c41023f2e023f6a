"""``skills.py package``: build dist/<install-name>/ (the installed skill) and its zip."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import add_root, root_of

HELP = "build dist/<install-name>/ (the installed skill) and its zip"


def configure(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--out", help="output folder (default: ROOT/dist)")


def run(args: argparse.Namespace) -> int:
    from ..package import PackageError, build_package

    root = root_of(args)
    try:
        folder, zip_path = build_package(root, Path(args.out) if args.out else root / "dist")
    except (PackageError, OSError) as exc:
        print(f"skills.py package: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {folder} and {zip_path}")
    return 0
