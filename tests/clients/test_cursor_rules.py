"""Cursor's published plugin validator, reproduced: the repository's Cursor marketplace and plugin pass it.

Cursor publishes no command-line client that loads a plugin offline, so this reproduces the checks of
cursor/plugins ``scripts/validate-plugins.mjs`` at commit 353b583b8aa15516387707884f593058dbc744c8:
the marketplace and each plugin.json against Cursor's schemas (ours in ``schemas/cursor-*.schema.json`` are
written from its ``schemas/marketplace.schema.json`` and ``schemas/plugin.schema.json``), the source folder
and its ``.cursor-plugin/plugin.json`` exist, the names match, and every component path (``skills``,
``agents``, ``commands``, ``rules``; ``hooks``, ``mcpServers``, ``logo`` when strings) is a non-empty local
path that, without its leading ``./`` and trailing ``/``, is not empty, not absolute, has no ``..`` and exists
(a glob by its static prefix). The negative cases show each reproduced rule can fail.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[2]
NAME = "spark-rtm-lakebase"

pytestmark = pytest.mark.clients

COMPONENT_PATH_FIELDS = ("skills", "agents", "commands", "rules")
COMPONENT_SINGLE_PATH_FIELDS = ("hooks", "mcpServers", "logo")


def _schema(name: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((REPO / "schemas" / name).read_text()))


def _check_path(errors: list[str], plugin: str, plugin_dir: Path, field: str, declared: object) -> None:
    if not isinstance(declared, str):
        return
    if not declared.strip():
        errors.append(f'Plugin "{plugin}": {field} path must not be empty')
        return
    if re.match(r"^(?:https?:|data:)", declared, re.I):
        if field != "logo":
            errors.append(f'Plugin "{plugin}": {field} path "{declared}" must be a local path')
        return
    normalized = re.sub(r"/+$", "", re.sub(r"^\./", "", declared))
    if not normalized or normalized.startswith("/"):
        errors.append(f'Plugin "{plugin}": {field} path "{declared}" must be relative to the plugin directory')
        return
    if ".." in re.split(r"[\\/]", normalized):
        errors.append(f'Plugin "{plugin}": {field} path "{declared}" must not escape the plugin directory')
        return
    glob = re.search(r"[*?[\]]", normalized)
    static = re.sub(r"/+$", "", normalized[:glob.start()]) if glob else normalized
    if not (plugin_dir / static).exists():
        errors.append(f'Plugin "{plugin}": {field} path "{declared}" does not exist')


def cursor_validate(root: Path) -> list[str]:
    """The error lines validate-plugins.mjs would print for ``root`` (empty: it passes)."""
    errors: list[str] = []
    market_path = root / ".cursor-plugin" / "marketplace.json"
    if not market_path.exists():
        return [".cursor-plugin/marketplace.json not found"]
    market = json.loads(market_path.read_text())
    errors += [f"marketplace.json: {e.message}" for e in _schema("cursor-marketplace.schema.json").iter_errors(market)]
    for entry in market.get("plugins", []):
        plugin_dir = (root / entry["source"]).resolve()
        if not plugin_dir.exists():
            errors.append(f'Plugin "{entry["name"]}": source directory "{entry["source"]}" does not exist')
            continue
        manifest_path = plugin_dir / ".cursor-plugin" / "plugin.json"
        if not manifest_path.exists():
            errors.append(f'Plugin "{entry["name"]}": missing .cursor-plugin/plugin.json in "{entry["source"]}"')
            continue
        manifest = json.loads(manifest_path.read_text())
        errors += [f"plugin.json: {e.message}" for e in _schema("cursor-plugin.schema.json").iter_errors(manifest)]
        if manifest.get("name") and manifest["name"] != entry["name"]:
            errors.append(f'Plugin "{entry["name"]}": marketplace name does not match plugin.json name')
        for field in COMPONENT_PATH_FIELDS + COMPONENT_SINGLE_PATH_FIELDS:
            value = manifest.get(field)
            if value is None:
                continue
            for declared in value if isinstance(value, list) else [value]:
                _check_path(errors, entry["name"], plugin_dir, field, declared)
    return errors


def test_the_repository_passes_cursors_plugin_validator():
    assert cursor_validate(REPO) == []
    manifest = json.loads((REPO / "plugins" / NAME / ".cursor-plugin" / "plugin.json").read_text())
    assert manifest["skills"] == "./skills/"  # checked, not skipped


@pytest.mark.parametrize(("skills", "expected"), [
    ("./", "must be relative to the plugin directory"),
    ("/abs/skills", "must be relative to the plugin directory"),
    ("./skils/", "does not exist"),
    ("../elsewhere", "must not escape the plugin directory"),
    ("https://example.org/skills", "must be a local path"),
    ("", "must not be empty"),
])
def test_each_reproduced_path_rule_fails_on_its_case(tmp_path, skills, expected):
    root = Path(shutil.copytree(REPO / "plugins", tmp_path / "plugins")).parent
    shutil.copytree(REPO / ".cursor-plugin", root / ".cursor-plugin")
    manifest_path = root / "plugins" / NAME / ".cursor-plugin" / "plugin.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "skills": skills}))
    errors = cursor_validate(root)
    assert len(errors) == 1 and expected in errors[0], errors


def test_schema_and_name_rules_fail_on_their_cases(tmp_path):
    root = Path(shutil.copytree(REPO / "plugins", tmp_path / "plugins")).parent
    shutil.copytree(REPO / ".cursor-plugin", root / ".cursor-plugin")
    manifest_path = root / "plugins" / NAME / ".cursor-plugin" / "plugin.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "name": "Other Name", "skillz": "./skills/"}))
    errors = cursor_validate(root)
    assert any("does not match" in e for e in errors) and any("skillz" in e for e in errors), errors
