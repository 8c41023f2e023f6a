"""Which files make up the pack (for the manifest) and which Markdown files the link/lint checks cover."""

from __future__ import annotations

import os
from pathlib import Path

#: Folders never scanned for Markdown: tools, builds, caches, the validator's deliberately broken fixtures,
#: the user files `skills.py check` is tested on, eval answers (graded by `skills.py eval`, some wrong on purpose),
#: the generated plugin folder (a copy of the skill, checked for drift as a whole: PLUG007) and the built
#: package dist/ (gitignored; a stale one would be reported against sources that moved on).
SKIP_DIRS = {"node_modules", "site", "__pycache__"}
SKIP_PREFIXES = ("tests/validator/fixtures", "tests/check_files", "evals/answers", "evals/results", "plugins/", "dist/")

#: Folders of Python code that references may excerpt and link: the user's package
#: (``rtm_lakebase``), the pack's own lab (``pack_lab``) and runnable examples.
CODE_DIRS = ("rtm_lakebase", "pack_lab", "examples")


def _rel(root: Path, p: Path) -> str:
    return p.relative_to(root).as_posix()


def _skipped(rel: str) -> bool:
    parts = rel.split("/")
    if any(p in SKIP_DIRS or p.startswith(".") or p.endswith(".egg-info") for p in parts[:-1]):
        return True
    return rel.startswith(SKIP_PREFIXES)


def pack_files(root: Path) -> list[tuple[str, str]]:
    """(relative path, role) of every pack file, sorted by path."""
    found: dict[str, str] = {}
    if os.path.lexists(root / "SKILL.md"):
        found["SKILL.md"] = "skill"
    patterns = [
        ("references", "**/*.md", "reference"),
        *((folder, "**/*.py", "example") for folder in CODE_DIRS),
        ("schemas", "*.json", "schema"),
        ("scripts/skillcheck", "**/*.py", "tool"),
    ]
    for folder, pattern, role in patterns:
        base = root / folder
        if base.is_dir():
            for p in base.glob(pattern):
                rel = _rel(root, p)
                # Anything but a plain folder: FIFOs, devices and odd symlinks are reported, never opened.
                if (not p.is_dir() or p.is_symlink() or p.suffix == ".md") and not _skipped(rel):
                    found[rel] = role
    if (root / "scripts" / "skills.py").is_file():
        found["scripts/skills.py"] = "tool"
    return sorted(found.items())


def markdown_files(root: Path) -> list[str]:
    """Every Markdown file of the repo, pruning tool, build and hidden folders while walking."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        reldir = Path(dirpath).relative_to(root).as_posix()
        reldir = "" if reldir == "." else reldir + "/"
        dirnames[:] = sorted(d for d in dirnames
                             if not _skipped(reldir + d + "/x") and not (reldir + d).startswith(SKIP_PREFIXES))
        for name in filenames:
            if name.endswith(".md") and not _skipped(reldir + name):
                out.append(reldir + name)
        for d in list(dirnames):  # a directory named like a Markdown file: reported as unreadable later
            if d.endswith(".md"):
                out.append(reldir + d)
    return sorted(out)
