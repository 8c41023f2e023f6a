"""Positive and negative fixtures for the plugin-manifest (PLUG*) and package (PKG*) codes, on the mini pack.

The mini pack (name ``mini-skill``, version 0.3.0) gets the real pack's
manifest schemas and one plugin manifest; each positive fixture breaks one
thing, its negative twin is the correct form.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.validator.packbuilder import REPO, add_prose, write_manifest

GOOD = {"name": "mini-skill", "version": "0.3.0", "description": "Mini.", "skills": ["./"]}


def _plugin(rel: str = ".claude-plugin/plugin.json", raw: str | None = None, **changes):
    def apply(root: Path) -> None:
        for schema in (REPO / "schemas").glob("*.json"):
            shutil.copy(schema, root / "schemas" / schema.name)
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(raw if raw is not None else json.dumps({**GOOD, **changes}, indent=2) + "\n")
        write_manifest(root)
    return apply


PLUGIN_TABLE = """
[tool.skill.plugin]
display-name = "Mini skill"
description = "A small pack used by the validator tests."
short-description = "A small pack for the validator tests"
author = "mini maintainers"
license = "Apache-2.0"
category = "development"
keywords = ["mini"]
"""


def _marketplace(source: str = "./plugins/mini-skill", build: bool = True, root_plugin: bool = False):
    """A Claude Code marketplace naming ``source``; ``build`` generates plugins/mini-skill/ with package.py."""
    def apply(root: Path) -> None:
        from skillcheck.package import build_plugin

        _plugin()(root) if root_plugin else _plugin(".claude-plugin/unused.json")(root)
        (root / ".claude-plugin" / "unused.json").unlink(missing_ok=True)
        with (root / "pyproject.toml").open("a") as f:
            f.write(PLUGIN_TABLE)
        market = {"name": "mini-skill", "owner": {"name": "mini maintainers"},
                  "plugins": [{"name": "mini-skill", "source": source}]}
        (root / ".claude-plugin" / "marketplace.json").write_text(json.dumps(market, indent=2) + "\n")
        if build:
            build_plugin(root)
        write_manifest(root)
    return apply


def _second_skill(root: Path) -> None:
    _plugin()(root)
    (root / "examples" / "nested").mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "SKILL.md", root / "examples" / "nested" / "SKILL.md")


def _codex_card(short: str):
    """The Codex skill card (agents/openai.yaml) beside a pyproject whose plugin card says "A small pack for the
    validator tests"; PLUG010 when the two short descriptions differ."""
    def apply(root: Path) -> None:
        _plugin()(root)
        with (root / "pyproject.toml").open("a") as f:
            f.write(PLUGIN_TABLE)
        (root / "agents").mkdir(exist_ok=True)
        (root / "agents" / "openai.yaml").write_text(
            f'interface:\n  display_name: "Mini skill"\n  short_description: "{short}"\n'
            '  default_prompt: "Use $mini-skill to check a mini pack."\n'
            'policy:\n  allow_implicit_invocation: true\n')
        write_manifest(root)
    return apply


def _repository(root: Path) -> None:
    p = root / "pyproject.toml"
    p.write_text(p.read_text().replace('version = "0.3.0"\n', 'version = "0.3.0"\n\n[project.urls]\n'
                                       'Repository = "https://example.org/mini"\n', 1))
    add_prose(root, "See [the project file](../pyproject.toml).")


PLUGIN_CASES: dict[str, tuple] = {
    "PLUG001": (_plugin(".codex-plugin/plugin.json", raw='{"name": "mini-skill",'),
                _plugin(".codex-plugin/plugin.json", skills="./")),
    "PLUG002": (_plugin(homepage_typo="x"), _plugin()),
    "PLUG003": (_plugin(name="other-skill"), _plugin()),
    "PLUG004": (_plugin(version="9.9.9"), _plugin()),
    "PLUG005": (_plugin(skills=["./nowhere"]), _plugin(skills=["./"])),
    "PLUG006": (_second_skill, _plugin()),
    # The generated plugin folder: missing (or stale) versus built by package.
    "PLUG007": (_marketplace(build=False), _marketplace()),
    # Codex ignores a skills path equal to the plugin root; "./skills/" in the generated folder is read.
    "PLUG008": (_plugin(".codex-plugin/plugin.json", skills="./"), _marketplace()),
    # The marketplace names the whole pack (pyproject.toml, references/ ... copied into the client's cache).
    "PLUG009": (_marketplace(source="./", build=False, root_plugin=True), _marketplace()),
    # One short description: the Codex skill card says what the plugin card says.
    "PLUG010": (_codex_card("A faster pack for the validator tests"), _codex_card("A small pack for the validator tests")),
    # A root-absolute link resolves in the pack but not in the installed folder.
    "PKG001": (lambda r: add_prose(r, "See [the project file](/pyproject.toml)."),
               lambda r: add_prose(r, "See [the guide](guide.md).")),
    "PKG002": (lambda r: add_prose(r, "See [the project file](../pyproject.toml)."), _repository),
}
