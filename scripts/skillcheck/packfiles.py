"""Which files make up the pack (for the manifest) and which Markdown files the link/lint checks cover."""

from __future__ import annotations

from pathlib import Path

#: Folders never scanned for Markdown: tools, builds, caches, and the validator's deliberately broken fixtures.
SKIP_DIRS = {"node_modules", "site", "__pycache__"}
SKIP_PREFIXES = ("tests/validator/fixtures",)


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
    if (root / "SKILL.md").exists():
        found["SKILL.md"] = "skill"
    patterns = [
        ("references", "**/*.md", "reference"),
        ("examples", "**/*.py", "example"),
        ("schemas", "*.json", "schema"),
        ("scripts/skillcheck", "**/*.py", "tool"),
    ]
    for folder, pattern, role in patterns:
        base = root / folder
        if base.is_dir():
            for p in base.glob(pattern):
                rel = _rel(root, p)
                if (p.is_file() or p.suffix == ".md") and not _skipped(rel):
                    found[rel] = role
    if (root / "scripts" / "skills.py").is_file():
        found["scripts/skills.py"] = "tool"
    return sorted(found.items())


def markdown_files(root: Path) -> list[str]:
    out = []
    for p in root.rglob("*.md"):
        rel = _rel(root, p)
        if not _skipped(rel):
            out.append(rel)
    return sorted(out)
