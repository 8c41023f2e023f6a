"""``skills.py package``: build dist/<install-name>/ (the installed skill), its zip, and plugins/<install-name>/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import add_root, root_of

HELP = "build dist/<install-name>/ (the installed skill), its zip, and the plugin folder plugins/<install-name>/"


def configure(parser: argparse.ArgumentParser) -> None:
    add_root(parser)
    parser.add_argument("--out", help="output folder (default: ROOT/dist, and the plugin in ROOT/plugins; "
                                      "with --out both go there: OUT/<install-name>/, OUT/plugins/<install-name>/)")


def run(args: argparse.Namespace) -> int:
    from ..package import PLUGINS_DIR, PackageError, build_package, build_plugin, has_plugin_settings

    root = root_of(args)
    out = Path(args.out) if args.out else None
    try:
        folder, zip_path = build_package(root, out or root / "dist")
        plugin = build_plugin(root, (out or root) / PLUGINS_DIR) if has_plugin_settings(root) else None
    except (PackageError, OSError) as exc:
        print(f"skills.py package: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {folder}, {zip_path} and {plugin}" if plugin else
          f"wrote {folder} and {zip_path} (no [tool.skill.plugin] in pyproject.toml: no plugin folder)")
    return 0
