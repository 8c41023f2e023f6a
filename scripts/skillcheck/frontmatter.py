"""SKILL.md front matter against the Agent Skills specification.

Rules used (Agent Skills specification, https://agentskills.io/specification,
as summarised by its reference validator ``skills-ref``): the allowed top-level
keys are exactly ``name``, ``description``, ``license``, ``compatibility``,
``metadata`` and ``allowed-tools``; ``name`` is 1-64 characters of lowercase
letters, digits and hyphens, does not start or end with a hyphen, has no
consecutive hyphens and equals the folder the skill is installed under;
``description`` is 1-1024 characters; ``compatibility`` is at most 500
characters; ``metadata`` maps strings to strings; ``allowed-tools`` is a
space-delimited string; the SKILL.md body should stay under 500 lines. The
pack also forbids ``<`` and ``>`` in the description (they break the XML-ish
prompts some agents build from it).

The install folder name is declared in ``pyproject.toml`` as
``[tool.skill] install-name``, because the checkout's own folder may differ.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .findings import Finding
from .markdown import Document
from .limits import MAX_FRONT_MATTER_BYTES, MAX_NESTING
from .readfile import read_pack_text

ALLOWED_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_BODY_LINES = 500


@dataclass
class FrontMatter:
    data: dict[str, Any]
    ok: bool


def read_install_name(root: Path) -> tuple[str | None, str | None]:
    """(install-name, problem) from pyproject.toml's [tool.skill] table."""
    path = root / "pyproject.toml"
    if not path.exists() and not path.is_symlink():
        return None, "pyproject.toml not found (it declares [tool.skill] install-name)"
    text, problem = read_pack_text(root, "pyproject.toml")
    if problem:
        return None, f"pyproject.toml unreadable: {problem.message}"
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        return None, f"pyproject.toml unreadable: {_first_line(exc)}"
    tool = data.get("tool")
    skill = tool.get("skill") if isinstance(tool, dict) else None
    name = skill.get("install-name") if isinstance(skill, dict) else None
    if not isinstance(name, str) or not name:
        return None, "pyproject.toml has no [tool.skill] install-name"
    return name, None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def _yaml_shape_problem(raw: str) -> str | None:
    """Refuse aliases (exponential expansion) and nesting past MAX_NESTING, from the event stream (no recursion)."""
    depth = 0
    try:
        for event in yaml.parse(raw, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                return "YAML aliases (*name) are not allowed"
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_NESTING:
                    return f"nested deeper than {MAX_NESTING} levels"
            elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
    except yaml.YAMLError:
        return None  # reported with its position by safe_load
    return None


def parse_front_matter(doc: Document) -> tuple[FrontMatter, list[Finding]]:
    path = doc.path
    if doc.front_matter is None:
        return FrontMatter({}, False), [Finding(path, 1, 1, "FM001", "no front matter: SKILL.md must start with a '---' YAML block")]
    first, last = doc.front_matter
    raw = "\n".join(doc.lines[first:last - 1])
    if len(raw.encode("utf-8")) > MAX_FRONT_MATTER_BYTES:
        return FrontMatter({}, False), [Finding(path, first, 1, "FM001",
                                                f"front matter is over {MAX_FRONT_MATTER_BYTES:,} bytes")]
    try:
        problem = _yaml_shape_problem(raw)
        if problem:
            return FrontMatter({}, False), [Finding(path, first, 1, "FM001", f"front matter refused: {problem}")]
        data = yaml.safe_load(raw) if raw.strip() else None
    except (RecursionError, MemoryError) as exc:
        return FrontMatter({}, False), [Finding(path, first, 1, "FM001",
                                                f"front matter cannot be read: {type(exc).__name__}")]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = first + 1 + (mark.line if mark else 0)
        col = (mark.column + 1) if mark else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return FrontMatter({}, False), [Finding(path, line, col, "FM001", f"front matter is not valid YAML: {problem}")]
    if not isinstance(data, dict):
        return FrontMatter({}, False), [Finding(path, first, 1, "FM001", "front matter must be a YAML mapping of keys")]
    return FrontMatter(data, True), []


def _key_line(doc: Document, key: str) -> int:
    if doc.front_matter:
        first, last = doc.front_matter
        for i in range(first, last - 1):
            if re.match(rf"^{re.escape(key)}\s*:", doc.lines[i]):
                return i + 1
        return first
    return 1


def check_front_matter(doc: Document, fm: FrontMatter, install_name: str | None, install_problem: str | None) -> list[Finding]:
    out: list[Finding] = []
    path = doc.path
    data = fm.data
    if not fm.ok:
        return out
    for key in data:
        if key not in ALLOWED_KEYS:
            out.append(Finding(path, _key_line(doc, str(key)), 1, "FM002",
                               f"key {key!r} is not allowed (allowed: {', '.join(ALLOWED_KEYS)}); put extra data under metadata"))
    name = data.get("name")
    nline = _key_line(doc, "name")
    if not isinstance(name, str) or not name:
        out.append(Finding(path, nline, 1, "FM003", "name is missing or not a string"))
    else:
        if len(name) > 64 or not NAME_RE.match(name):
            out.append(Finding(path, nline, 1, "FM003",
                               f"name {name!r} must be 1-64 chars of a-z, 0-9, '-' without leading, trailing or double hyphens"))
        if install_problem:
            out.append(Finding(path, nline, 1, "FM004", install_problem))
        elif name != install_name:
            out.append(Finding(path, nline, 1, "FM004",
                               f"name {name!r} differs from the install folder name {install_name!r} ([tool.skill] install-name)"))
    desc = data.get("description")
    dline = _key_line(doc, "description")
    if not isinstance(desc, str) or not desc.strip():
        out.append(Finding(path, dline, 1, "FM005", "description is missing or empty"))
    else:
        if len(desc) > 1024:
            out.append(Finding(path, dline, 1, "FM005", f"description is {len(desc)} chars (max 1024)"))
        if "<" in desc or ">" in desc:
            out.append(Finding(path, dline, 1, "FM005", "description must not contain '<' or '>'"))
    for key in ("license", "allowed-tools"):
        if key in data and not isinstance(data[key], str):
            out.append(Finding(path, _key_line(doc, key), 1, "FM007", f"{key} must be a string"))
    if "compatibility" in data:
        comp = data["compatibility"]
        if not isinstance(comp, str) or not 1 <= len(comp) <= 500:
            out.append(Finding(path, _key_line(doc, "compatibility"), 1, "FM007", "compatibility must be a string of 1-500 chars"))
    if "metadata" in data:
        meta = data["metadata"]
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            out.append(Finding(path, _key_line(doc, "metadata"), 1, "FM007",
                               "metadata must map strings to strings (quote numbers such as version: \"0.1.0\")"))
    body_lines = len(doc.lines) - (doc.front_matter[1] if doc.front_matter else 0)
    if body_lines >= MAX_BODY_LINES:
        out.append(Finding(path, doc.body_start, 1, "FM006", f"body has {body_lines} lines (keep it under {MAX_BODY_LINES})"))
    return out
