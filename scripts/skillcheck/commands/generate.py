"""``skills.py generate``: rewrite every generated file and block; ``--check`` writes nothing and reports.

What it writes, in order: reference excerpts (fences after ``<!-- excerpt: ... -->``),
the blocks between ``<!-- generated:NAME -->`` markers (see
:mod:`skillcheck.generated`), then manifest.json (it hashes the files above), then the
plugin folder ``plugins/<install-name>/`` when the pack has one (the skill as ``package`` builds it).
``validate`` reports the same things as findings (EXC003, GEN001, MAN004, PLUG007).
"""

from __future__ import annotations

import argparse

from . import add_root, root_of

HELP = "rewrite manifest.json, excerpts and generated Markdown blocks (--check: report, write nothing)"


def configure(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list what generate would change and exit 1 if anything is stale")


def run(args: argparse.Namespace) -> int:
    from ..manifest import MANIFEST, PackError, check_manifest, write_manifest
    from ..package import PLUGINS_DIR, PackageError, build_plugin, check_plugin_drift
    from ..regenerate import regenerate_markdown

    root = root_of(args)
    changed, problems = regenerate_markdown(root, write=not args.check)
    for f in problems:
        print(f.text())
    if args.check:
        stale = [f for f in check_manifest(root) if f.code in ("MAN001", "MAN004")]
        stale += [] if changed else check_plugin_drift(root)  # stale Markdown makes the plugin stale too
        for rel in changed:
            print(f"{rel}:1:1 GEN001 generated content is stale; run `python scripts/skills.py generate`")
        for f in stale:
            print(f.text())
        ok = not (changed or stale or problems)
        print("OK: every generated file and block is current" if ok
              else "FAILED: generated content is stale or cannot be generated")
        return 0 if ok else 1
    for rel in changed:
        print(f"rewrote {rel}")
    try:
        path = write_manifest(root)
    except PackError as exc:
        for f in exc.findings:
            print(f.text())
        print(f"FAILED: {MANIFEST} not written")
        return 1
    print(f"wrote {path.relative_to(root)}")
    if check_plugin_drift(root):
        try:
            plugin = build_plugin(root, root / PLUGINS_DIR)
        except (PackageError, OSError) as exc:
            print(f"FAILED: {PLUGINS_DIR}/ not written: {exc}")
            return 1
        print(f"wrote {plugin.relative_to(root)}/")
    return 1 if problems else 0
