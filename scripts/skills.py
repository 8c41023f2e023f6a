#!/usr/bin/env python3
"""Pack tool: `generate` rewrites manifest.json, `validate` checks the whole pack, `rules` lists finding codes.

    python scripts/skills.py generate [--root PATH]
    python scripts/skills.py validate [--format text|json] [--root PATH] [--no-external]
    python scripts/skills.py rules
    python scripts/skills.py package [--root PATH] [--out DIR]

`validate` prints one `path:line:col CODE message` line per finding and a
summary line; it exits 1 when there are findings, 0 when clean, 2 on usage
errors. `--no-external` skips markdownlint and mkdocs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from skillcheck.codes import rules_table  # noqa: E402
from skillcheck.findings import render  # noqa: E402
from skillcheck.manifest import MANIFEST, PackError, write_manifest  # noqa: E402
from skillcheck.validate import validate_pack  # noqa: E402

DEFAULT_ROOT = Path(__file__).resolve().parent.parent


def _root(value: str | None) -> Path:
    root = Path(value) if value else DEFAULT_ROOT
    if not root.is_dir():
        raise SystemExit(_usage_error(f"--root {value!r} is not a directory"))
    return root.resolve()


def _usage_error(message: str) -> int:
    print(f"skills.py: error: {message}", file=sys.stderr)
    return 2


def cmd_generate(args: argparse.Namespace) -> int:
    root = _root(args.root)
    try:
        path = write_manifest(root)
    except PackError as exc:
        for f in exc.findings:
            print(f.text())
        print(f"FAILED: {MANIFEST} not written")
        return 1
    print(f"wrote {path.relative_to(root)}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    root = _root(args.root)
    findings, checked = validate_pack(root, external=not args.no_external)
    print(render(findings, checked, args.format))
    return 1 if findings else 0


def cmd_package(args: argparse.Namespace) -> int:
    from skillcheck.package import PackageError, build_package

    root = _root(args.root)
    try:
        folder, zip_path = build_package(root, Path(args.out) if args.out else root / "dist")
    except (PackageError, OSError) as exc:
        print(f"skills.py package: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {folder} and {zip_path}")
    return 0


def cmd_rules(_args: argparse.Namespace) -> int:
    print(rules_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skills.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="rewrite manifest.json from the pack")
    gen.add_argument("--root", help="pack root (default: this checkout)")
    gen.set_defaults(func=cmd_generate)
    val = sub.add_parser("validate", help="check the pack; exit 1 on findings")
    val.add_argument("--root", help="pack root (default: this checkout)")
    val.add_argument("--format", choices=("text", "json"), default="text")
    val.add_argument("--no-external", action="store_true", help="skip markdownlint and mkdocs")
    val.set_defaults(func=cmd_validate)
    pkg = sub.add_parser("package", help="build dist/<install-name>/ (the installed skill) and its zip")
    pkg.add_argument("--root", help="pack root (default: this checkout)")
    pkg.add_argument("--out", help="output folder (default: ROOT/dist)")
    pkg.set_defaults(func=cmd_package)
    rules = sub.add_parser("rules", help="print the table of finding codes")
    rules.set_defaults(func=cmd_rules)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
