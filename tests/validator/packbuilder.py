"""Builds small, valid packs in a temporary folder for the validator's tests."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.manifest import write_manifest
from skillcheck.validate import validate_pack

PYPROJECT = """[project]
name = "mini-pack"
version = "0.3.0"

[tool.skill]
install-name = "mini-skill"
"""

SKILL = """---
name: mini-skill
description: A small pack used by the validator tests.
license: Apache-2.0
metadata:
  version: "1.2.3"
---

# Mini skill

Read the reference that matches your task.

| Reference | Read when |
| --- | --- |
| [Guide](references/guide.md) | Writing a real-time query. |
"""

GUIDE = """# Guide

How to write a real-time query, in one paragraph.

## Writing the query

Use the real-time trigger with a duration string, see [below](#the-sink).

```python
query = (df.writeStream.foreach(writer).outputMode("update")
         .trigger(realTime="5 seconds").start())
```

## The sink

<!-- excerpt: examples/snippets.py#hello -->
```python
def hello():
    return "hello"
```

See [the module](../examples/snippets.py).
"""

SNIPPETS = '''"""Small example module for the validator tests."""


# --8<-- [start:hello]
def hello():
    return "hello"
# --8<-- [end:hello]
'''


def make_pack(root: Path) -> Path:
    """A clean pack at ``root`` (validate --no-external reports nothing)."""
    (root / "references").mkdir(parents=True, exist_ok=True)
    (root / "examples").mkdir(exist_ok=True)
    (root / "schemas").mkdir(exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (root / "SKILL.md").write_text(SKILL, encoding="utf-8")
    (root / "references" / "guide.md").write_text(GUIDE, encoding="utf-8")
    (root / "examples" / "__init__.py").write_text("", encoding="utf-8")
    (root / "examples" / "snippets.py").write_text(SNIPPETS, encoding="utf-8")
    shutil.copy(REPO / "schemas" / "manifest.schema.json", root / "schemas" / "manifest.schema.json")
    write_manifest(root)
    return root


def codes(root: Path, external: bool = False) -> list[str]:
    findings, _ = validate_pack(root, external=external)
    return [f.code for f in findings]


def findings(root: Path, external: bool = False):
    return validate_pack(root, external=external)[0]


def add_block(root: Path, code: str, lang: str = "python", before: str = "", file: str = "references/guide.md",
              regenerate: bool = True) -> None:
    """Append a section with one fenced block (optionally preceded by comment lines) to a Markdown file."""
    path = root / file
    text = path.read_text(encoding="utf-8")
    lines = ["", "## Added section", ""]
    if before:
        lines.append(before)
    lines += [f"```{lang}", code.rstrip("\n"), "```", ""]
    path.write_text(text.rstrip("\n") + "\n" + "\n".join(lines), encoding="utf-8")
    if regenerate:
        write_manifest(root)


def add_prose(root: Path, prose: str, file: str = "references/guide.md", before: str = "") -> None:
    path = root / file
    text = path.read_text(encoding="utf-8").rstrip("\n")
    extra = f"\n\n{before}\n{prose}\n" if before else f"\n\n{prose}\n"
    path.write_text(text + extra, encoding="utf-8")
    write_manifest(root)
