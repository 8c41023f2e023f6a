"""``skills.py generate``: rewrite manifest.json (``--check``: only report what is stale)."""

from __future__ import annotations

import argparse

from . import add_root, root_of

HELP = "rewrite manifest.json and every generated Markdown block (--check: report, write nothing)"


def configure(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 and list what generate would change")


def run(args: argparse.Namespace) -> int:
    from ..manifest import MANIFEST, PackError, check_manifest, write_manifest

    root = root_of(args)
    if args.check:
        stale = [f for f in check_manifest(root) if f.code == "MAN004" or f.code == "MAN001"]
        for f in stale:
            print(f.text())
        print("FAILED: generated files are stale; run `python scripts/skills.py generate`" if stale
              else "OK: every generated file is current")
        return 1 if stale else 0
    try:
        path = write_manifest(root)
    except PackError as exc:
        for f in exc.findings:
            print(f.text())
        print(f"FAILED: {MANIFEST} not written")
        return 1
    print(f"wrote {path.relative_to(root)}")
    return 0
