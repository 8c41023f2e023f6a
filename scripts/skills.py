#!/usr/bin/env python3
"""Pack tool: one subcommand per job, listed in COMMANDS below.

    python scripts/skills.py generate [--root PATH] [--check]
    python scripts/skills.py validate [--format text|json] [--root PATH] [--no-external]
    python scripts/skills.py rules
    python scripts/skills.py package [--root PATH] [--out DIR]
    python scripts/skills.py check [--format text|json] PATH...
    python scripts/skills.py eval grade DIR [--skill-commit SHA] | eval run --trials N --out DIR [--agent "CMD {prompt_file} {answer_dir}"]

`generate` rewrites manifest.json and every generated Markdown block;
`validate` prints one `path:line:col CODE message` line per finding and a
summary line, and exits 1 when there are findings, 0 when clean; `rules` lists
the finding codes; `package` builds the installed skill folder and its zip;
`check` runs the code and prose rules on a user's files; `eval` grades and runs
the evals. Usage errors exit 2. No subcommand prints a traceback: an
unexpected error is one line on stderr (exit 3; SKILLS_DEBUG=1 shows the
traceback).

Adding a subcommand: write ``scripts/skillcheck/commands/NAME.py`` with
``HELP`` (one line), ``configure(parser)`` and ``run(args) -> int``, and add
one line to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The rule engine for users' files ships with the skill as rtm_lakebase.check, at the repository root.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

#: subcommand -> module under skillcheck/commands/ (imported only when that subcommand runs).
COMMANDS: dict[str, str] = {
    "generate": "skillcheck.commands.generate",
    "validate": "skillcheck.commands.validate",
    "rules": "skillcheck.commands.rules",
    "package": "skillcheck.commands.package",
    "check": "skillcheck.commands.check",
    "eval": "skillcheck.commands.eval",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="skills.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure(command)
        command.set_defaults(func=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `skills.py rules | head`: the reader left, not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("skills.py: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # run outside the pack's virtual environment (e.g. package.sh's small one)
        print(f"skills.py: {args.command} needs the Python package {exc.name!r}, which {sys.executable} lacks "
              "(a dev dependency): run `bash scripts/setup.sh` once (it creates .venv with them), then "
              f"`.venv/bin/python scripts/skills.py {args.command}`", file=sys.stderr)
        return 2
    except Exception as exc:  # last resort: one line, never a traceback (unless asked for)
        if os.environ.get("SKILLS_DEBUG"):
            traceback.print_exc()
        print(f"skills.py: internal error in {args.command!r}: {type(exc).__name__}: {exc}"
              " (set SKILLS_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
