"""MkDocs hook: publish the pack's own files as the site, without copying them.

The skill's layout (``SKILL.md`` at the top, ``references/``, the code folders)
is what an assistant loads, so the site is built from those same files:
``SKILL.md`` becomes the home page and the references, example modules,
benchmarks and test modules they link to are added from the repository root.
Relative links therefore resolve the same way on disk, on GitHub and in the
site, and ``mkdocs build --strict`` checks them.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent

#: (glob relative to the repository root, published as-is) — code linked from the pages.
_PUBLISHED = (
    "references/*.md",
    "rtm_lakebase/*.py",
    "rtm_lakebase/jvm/*.java",
    "pack_lab/*.py",
    "examples/*.py",
    "benchmarks/*.py",
    "benchmarks/*.md",
    "benchmarks/results/*.json",
    "benchmarks/results/*.png",
    "tests/*.py",
    "tests/*/*.py",
    "tests/data/*.json",
    "scripts/*.py",
    "scripts/*.sh",
    "manifest.json",
    "schemas/*.json",
    "pyproject.toml",
)


def on_files(files: Files, config) -> Files:
    files.append(File.generated(config, "index.md", abs_src_path=str(ROOT / "SKILL.md")))
    seen = {"index.md"}
    for pattern in _PUBLISHED:
        for path in sorted(ROOT.glob(pattern)):
            rel = path.relative_to(ROOT).as_posix()
            if rel in seen or files.get_file_from_path(rel) is not None:
                continue
            seen.add(rel)
            files.append(File.generated(config, rel, abs_src_path=str(path)))
    return files
