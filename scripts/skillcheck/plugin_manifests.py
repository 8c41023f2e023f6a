"""Plugin and marketplace manifests for Claude Code, Codex and Cursor, checked against the skill.

Each manifest present is checked (a pack without plugin packaging is still a
valid skill): it parses, it is valid against its schema in ``schemas/``
(written from each tool's published reference; see each schema's
``$comment``), every plugin ``name`` equals SKILL.md's ``name``, every
``version`` equals ``[project] version`` in pyproject.toml, every path it names
exists inside the pack (a skills path holds SKILL.md, a marketplace source holds
that tool's plugin manifest), and a skills path holds exactly one SKILL.md
(Codex walks the folder for every SKILL.md it finds).

What the clients accept, beyond what they parse: Codex 0.169 ignores a plugin
whose ``skills`` is the plugin root (it logs ``ignoring skills: path must not
be './'`` and loads no skill) and Cursor's plugin validator refuses that path
(cursor/plugins ``scripts/validate-plugins.mjs`` at commit
353b583b8aa15516387707884f593058dbc744c8: a path that is empty after removing
``./`` and trailing ``/`` "must be relative to the plugin directory"): PLUG008.
Every client copies a marketplace's plugin folder whole and reads parts of it
by folder name (Claude Code runs ``npm ci`` for a package.json and reads
``agents/`` as subagents), so that folder holds the manifests and ``skills/``
only: PLUG009. The generated folder ``plugins/<install-name>/`` is checked
like any plugin, and for drift (PLUG007, :mod:`skillcheck.package`).
"""

from __future__ import annotations

import json
import posixpath
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from rtm_lakebase.check.findings import Finding

from .frontmatter import _yaml_shape_problem, parse_front_matter
from .limits import MAX_NESTING
from .markdown import parse
from .readfile import nesting_depth, read_text_checked, safe_exists


@dataclass(frozen=True)
class Manifest:
    path: str           # where the tool reads it, relative to the pack root
    schema: str         # schemas/*.json
    kind: str           # "plugin", "marketplace" or "skill-metadata"
    plugin_manifest: str = ""  # marketplaces: the manifest a plugin source folder must hold


MANIFESTS = (
    Manifest(".claude-plugin/plugin.json", "schemas/claude-plugin.schema.json", "plugin"),
    Manifest(".claude-plugin/marketplace.json", "schemas/claude-marketplace.schema.json", "marketplace",
             ".claude-plugin/plugin.json"),
    Manifest(".codex-plugin/plugin.json", "schemas/codex-plugin.schema.json", "plugin"),
    Manifest(".agents/plugins/marketplace.json", "schemas/codex-marketplace.schema.json", "marketplace",
             ".codex-plugin/plugin.json"),
    Manifest("agents/openai.yaml", "schemas/codex-skill-metadata.schema.json", "skill-metadata"),
    Manifest(".cursor-plugin/plugin.json", "schemas/cursor-plugin.schema.json", "plugin"),
    Manifest(".cursor-plugin/marketplace.json", "schemas/cursor-marketplace.schema.json", "marketplace",
             ".cursor-plugin/plugin.json"),
)

#: The plugin manifests ``skills.py package`` writes into ``plugins/<install-name>/``.
GENERATED_PLUGIN_MANIFESTS = tuple(m for m in MANIFESTS if m.kind == "plugin")

#: Clients that ignore or refuse a skills path equal to the plugin root (PLUG008).
_ROOT_SKILLS_REFUSED = {".codex-plugin/plugin.json": "Codex ignores it and loads no skill",
                        ".cursor-plugin/plugin.json": "Cursor's plugin validator refuses it"}

#: What a marketplace's plugin folder may hold besides nothing (PLUG009).
PLUGIN_FOLDER_ALLOWED = {".claude-plugin", ".codex-plugin", ".cursor-plugin", "skills",
                         "README.md", "LICENSE", "LICENSE.txt", "CHANGELOG.md"}


def manifests_for(root: Path) -> list[Manifest]:
    """The pack-root manifests, then the generated plugin folder's (``plugins/<install-name>/...``)."""
    out = list(MANIFESTS)
    try:
        name = tomllib.loads(read_text_checked(root, "pyproject.toml"))["tool"]["skill"]["install-name"]
    except (OSError, KeyError, TypeError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError):
        return out
    if isinstance(name, str) and name and "/" not in name and not name.startswith("."):
        out += [Manifest(f"plugins/{name}/{m.path}", m.schema, m.kind) for m in GENERATED_PLUGIN_MANIFESTS]
    return out

#: Folders a skill walk never enters (hidden folders are skipped by Codex too).
_WALK_SKIP = {"node_modules", "site", "dist", "__pycache__", ".venv"}


def _line_of(text: str, needle: str) -> int:
    idx = text.find(needle)
    return text.count("\n", 0, idx) + 1 if idx >= 0 else 1


def _load(root: Path, rel: str) -> tuple[Any, str, Finding | None]:
    try:
        text = read_text_checked(root, rel)
    except (OSError, UnicodeDecodeError) as exc:
        return None, "", Finding(rel, 1, 1, "PLUG001", f"cannot read manifest: {exc}")
    try:
        shape = _yaml_shape_problem(text) if rel.endswith((".yaml", ".yml")) else None
        if shape:
            return None, text, Finding(rel, 1, 1, "PLUG001", f"YAML refused: {shape}")
        data = yaml.safe_load(text) if rel.endswith((".yaml", ".yml")) else json.loads(text)
        if nesting_depth(data, MAX_NESTING) > MAX_NESTING:
            return None, text, Finding(rel, 1, 1, "PLUG001", f"nested deeper than {MAX_NESTING} levels")
    except (RecursionError, MemoryError) as exc:
        return None, text, Finding(rel, 1, 1, "PLUG001", f"nested too deeply to read ({type(exc).__name__})")
    except json.JSONDecodeError as exc:
        return None, text, Finding(rel, exc.lineno, exc.colno, "PLUG001", f"invalid JSON: {exc.msg}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        return None, text, Finding(rel, line, 1, "PLUG001", f"invalid YAML: {getattr(exc, 'problem', exc)}")
    return data, text, None


def _schema(root: Path, rel: str, owner: str) -> tuple[Draft202012Validator | None, Finding | None]:
    try:
        schema = json.loads(read_text_checked(root, rel))
        Draft202012Validator.check_schema(schema)
    except FileNotFoundError:
        return None, Finding(owner, 1, 1, "PLUG001", f"its schema {rel} is missing")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, SchemaError, RecursionError, MemoryError) as exc:
        return None, Finding(rel, 1, 1, "PLUG001", f"not a valid draft 2020-12 schema: {getattr(exc, 'message', exc)}")
    return Draft202012Validator(schema), None


def skill_name(root: Path) -> str | None:
    try:
        text = read_text_checked(root, "SKILL.md")
    except (OSError, UnicodeDecodeError):
        return None
    fm, problems = parse_front_matter(parse("SKILL.md", text))
    name = fm.data.get("name") if not problems else None
    return name if isinstance(name, str) and name else None


def project_version(root: Path) -> str | None:
    try:
        version = tomllib.loads(read_text_checked(root, "pyproject.toml"))["project"]["version"]
    except (OSError, KeyError, TypeError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError):
        return None
    return version if isinstance(version, str) else None


def plugin_short_description(root: Path) -> str | None:
    """``[tool.skill.plugin] short-description``: the one text both Codex cards show."""
    try:
        text = tomllib.loads(read_text_checked(root, "pyproject.toml"))["tool"]["skill"]["plugin"]["short-description"]
    except (OSError, KeyError, TypeError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError):
        return None
    return text if isinstance(text, str) else None


def _inside(root: Path, base: str, target: str) -> tuple[str | None, bool]:
    """(pack-relative path, exists) of ``target`` relative to folder ``base``; None when it escapes."""
    rel = posixpath.normpath(posixpath.join(base, target))
    if rel.startswith("..") or posixpath.isabs(rel):
        return None, False
    rel = "" if rel == "." else rel
    return rel, safe_exists(root / rel)


def skill_files_under(folder: Path, max_depth: int = 6) -> list[Path]:
    """Every SKILL.md a tool walking ``folder`` would find (hidden and build folders skipped)."""
    found: list[Path] = []

    def walk(d: Path, depth: int) -> None:
        if depth > max_depth:
            return
        for child in sorted(d.iterdir()):
            if child.is_dir():
                if not child.name.startswith(".") and child.name not in _WALK_SKIP and not child.is_symlink():
                    walk(child, depth + 1)
            elif child.name == "SKILL.md":
                found.append(child)

    if folder.is_dir():
        walk(folder, 0)
    return found


def _check_skills_path(root: Path, rel: str, text: str, base: str, target: str) -> list[Finding]:
    line = _line_of(text, f'"{target}"')
    where, exists = _inside(root, base, target)
    if where is None:
        return [Finding(rel, line, 1, "PLUG005", f"skills path {target!r} leaves the plugin folder")]
    if not exists:
        return [Finding(rel, line, 1, "PLUG005", f"skills path {target!r} does not exist")]
    skills = skill_files_under(root / where)
    if not skills:
        return [Finding(rel, line, 1, "PLUG005", f"skills path {target!r} holds no SKILL.md")]
    if len(skills) > 1:
        others = ", ".join(p.relative_to(root).as_posix() for p in skills)
        return [Finding(rel, line, 1, "PLUG006", f"skills path {target!r} holds {len(skills)} SKILL.md files ({others})")]
    return []


def _plugin_base(rel: str) -> str:
    """The plugin root of a plugin manifest: the folder that holds ``.claude-plugin/`` etc."""
    return posixpath.dirname(posixpath.dirname(rel))


def _marketplace_root(rel: str) -> str:
    # .claude-plugin/marketplace.json -> "", .agents/plugins/marketplace.json -> ""
    parts = rel.split("/")
    return "/".join(parts[:-3]) if rel.endswith(".agents/plugins/marketplace.json") else "/".join(parts[:-2])


def check_manifest_file(root: Path, m: Manifest, name: str | None, version: str | None) -> list[Finding]:
    rel = m.path
    data, text, err = _load(root, rel)
    if err:
        return [err]
    validator, err = _schema(root, m.schema, rel)
    out: list[Finding] = [err] if err else []
    if validator is not None:
        for e in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
            where = "/".join(str(p) for p in e.absolute_path) or "(root)"
            out.append(Finding(rel, 1, 1, "PLUG002", f"{where}: {e.message} (schema {m.schema})"))
    if not isinstance(data, dict) or out:
        return out

    if m.kind == "skill-metadata":
        short, card = plugin_short_description(root), (data.get("interface") or {}).get("short_description")
        if short is not None and card is not None and card != short:
            out.append(Finding(rel, _line_of(text, "short_description"), 1, "PLUG010",
                               f"short_description {card!r} differs from [tool.skill.plugin] short-description "
                               f"{short!r} in pyproject.toml (the Codex plugin card shows that one)"))
    if m.kind == "plugin":
        if name and data.get("name") != name:
            out.append(Finding(rel, _line_of(text, '"name"'), 1, "PLUG003",
                               f"plugin name {data.get('name')!r} differs from SKILL.md name {name!r}"))
        if version and data.get("version") != version:
            out.append(Finding(rel, _line_of(text, '"version"'), 1, "PLUG004",
                               f"version {data.get('version')!r} differs from pyproject.toml version {version!r}"))
        skills = data.get("skills")
        client = next((why for suffix, why in _ROOT_SKILLS_REFUSED.items() if rel.endswith(suffix)), None)
        for target in ([skills] if isinstance(skills, str) else skills or []):
            if client and isinstance(target, str) and target.strip().removeprefix("./").strip("/") in ("", "."):
                out.append(Finding(rel, _line_of(text, f'"{target}"'), 1, "PLUG008",
                                   f"skills path {target!r} is the plugin root: {client}; "
                                   'put the skill in skills/<name>/ and write "skills": "./skills/"'))
                continue
            out += _check_skills_path(root, rel, text, _plugin_base(rel), target)
    elif m.kind == "marketplace":
        meta_version = (data.get("metadata") or {}).get("version")
        if version and meta_version is not None and meta_version != version:
            out.append(Finding(rel, _line_of(text, '"version"'), 1, "PLUG004",
                               f"metadata.version {meta_version!r} differs from pyproject.toml version {version!r}"))
        base = _marketplace_root(rel)
        for entry in data.get("plugins", []):
            pname = entry.get("name")
            if name and pname != name:
                out.append(Finding(rel, _line_of(text, f'"{pname}"'), 1, "PLUG003",
                                   f"marketplace plugin {pname!r} differs from SKILL.md name {name!r}"))
            if version and "version" in entry and entry["version"] != version:
                out.append(Finding(rel, _line_of(text, '"version"'), 1, "PLUG004",
                                   f"plugin {pname!r} version {entry['version']!r} differs from pyproject.toml version {version!r}"))
            source = entry.get("source")
            target = source if isinstance(source, str) else (source or {}).get("path") if (source or {}).get("source") == "local" else None
            if target is None:
                continue
            where, exists = _inside(root, base, target)
            line = _line_of(text, f'"{target}"')
            if where is None or not exists:
                out.append(Finding(rel, line, 1, "PLUG005", f"plugin source {target!r} does not exist inside the pack"))
            elif not safe_exists(root / where / m.plugin_manifest, "file"):
                out.append(Finding(rel, line, 1, "PLUG005",
                                   f"plugin source {target!r} holds no {m.plugin_manifest}"))
            else:
                extra = sorted(p.name + ("/" if p.is_dir() else "") for p in (root / where).iterdir()
                               if p.name not in PLUGIN_FOLDER_ALLOWED)
                if extra:
                    more = f" and {len(extra) - 4} more" if len(extra) > 4 else ""
                    out.append(Finding(rel, line, 1, "PLUG009",
                                       f"plugin source {target!r} holds more than the plugin: "
                                       f"{', '.join(extra[:4])}{more}; the client copies it all"))
    else:  # agents/openai.yaml beside SKILL.md
        if not safe_exists(root / posixpath.dirname(posixpath.dirname(rel)) / "SKILL.md", "file"):
            out.append(Finding(rel, 1, 1, "PLUG005", "agents/openai.yaml must sit in a skill folder, beside SKILL.md"))
        interface = data.get("interface") or {}
        prompt = interface.get("default_prompt")
        if name and isinstance(prompt, str) and f"${name}" not in prompt:
            out.append(Finding(rel, _line_of(text, "default_prompt"), 1, "PLUG003",
                               f"default_prompt does not invoke the skill as ${name}"))
        for key in ("icon_small", "icon_large"):
            icon = interface.get(key)
            if isinstance(icon, str):
                where, exists = _inside(root, posixpath.dirname(posixpath.dirname(rel)), icon)
                if where is None or not exists:
                    out.append(Finding(rel, _line_of(text, key), 1, "PLUG005", f"{key} {icon!r} does not exist"))
    return out


def check_plugin_manifests(root: Path) -> list[Finding]:
    """Findings for every plugin/marketplace manifest present in the pack."""
    name, version = skill_name(root), project_version(root)
    out: list[Finding] = []
    for m in manifests_for(root):
        if safe_exists(root / m.path):
            out += check_manifest_file(root, m, name, version)
    return out
