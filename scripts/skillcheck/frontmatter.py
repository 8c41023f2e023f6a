"""SKILL.md front matter: the Agent Skills specification through its reference validator, then the pack's own rules.

The specification's rules (https://agentskills.io/specification) are applied
by ``skills-ref`` (PyPI, the spec's reference library), whose
``validate_metadata`` checks the allowed keys (``name``, ``description``,
``license``, ``compatibility``, ``metadata``, ``allowed-tools``), the name
(1-64 chars, lowercase letters/digits/hyphens, no leading, trailing or double
hyphen, equal to the install folder), the description (1-1024 chars) and
``compatibility`` (at most 500 chars). Its findings are mapped to FM002-FM005
and FM007 and placed on the key's line.

What ``skills-ref`` 0.1.1 does not do, or does in a way the pack cannot use:
its parser splits the file at every ``---`` (a description containing
``---`` is silently cut short) and uses strictyaml (no line numbers; flow
mappings refused), and ``validate_metadata`` raises ``TypeError`` on a
non-string key. So the pack parses with PyYAML (line numbers, guarded against
aliases and deep nesting), passes string keys to ``validate_metadata``, and
runs the reference parser as a second reader: what it cannot read, or reads
differently, is FM001.

The pack's own rules: the name is ASCII (``skills-ref`` accepts any Unicode
letter); no ``<``/``>`` in the description; ``license`` and ``allowed-tools``
are strings; ``metadata`` maps strings to strings; the body stays under 500
lines (the specification's recommendation). The install folder name comes from
``pyproject.toml`` ``[tool.skill] install-name``, because the checkout's own
folder may differ.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rtm_lakebase.check.findings import Finding

from .limits import MAX_FRONT_MATTER_BYTES, MAX_NESTING
from .markdown import Document
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


#: skills-ref message prefix -> our code (its messages carry no code or line).
_SPEC_CODES = (
    ("Unexpected fields", "FM002", None),
    ("Directory name", "FM004", "name"),
    ("Missing required field in frontmatter: name", "FM003", "name"),
    ("Field 'name'", "FM003", "name"),
    ("Skill name", "FM003", "name"),
    ("Missing required field in frontmatter: description", "FM005", "description"),
    ("Field 'description'", "FM005", "description"),
    ("Description", "FM005", "description"),
    ("Field 'compatibility'", "FM007", "compatibility"),
    ("Compatibility", "FM007", "compatibility"),
)


def spec_findings(doc: Document, data: dict, install_name: str | None) -> list[Finding]:
    """The Agent Skills specification's rules, as its reference validator ``skills-ref`` applies them.

    ``skills_ref.validator.validate_metadata`` gets the mapping PyYAML read (keys as strings: it sorts
    them and fails on mixed types) and the install folder name (for its name == directory rule).
    Its own parser is also run on the file: what it cannot read, or reads differently, is FM001.
    """
    from skills_ref.errors import ParseError
    from skills_ref.parser import parse_frontmatter
    from skills_ref.validator import validate_metadata

    path = doc.path
    out: list[Finding] = []
    metadata = {str(k): v for k, v in data.items()}
    folder = Path(install_name) if install_name else None
    for message in validate_metadata(metadata, folder):
        code, key = next(((c, k) for prefix, c, k in _SPEC_CODES if message.startswith(prefix)), ("FM002", None))
        if code == "FM004" and not install_name:
            continue
        line = _key_line(doc, key) if key else (doc.front_matter[0] if doc.front_matter else 1)
        if code == "FM002":  # one finding per unexpected key, on its line
            for extra in sorted(k for k in metadata if k not in ALLOWED_KEYS):
                out.append(Finding(path, _key_line(doc, extra), 1, "FM002",
                                   f"skills-ref: field {extra!r} is not allowed (allowed: {', '.join(ALLOWED_KEYS)}); "
                                   "put extra data under metadata"))
            continue
        out.append(Finding(path, line, 1, code, f"skills-ref: {message}"))
    try:
        theirs, _ = parse_frontmatter(doc.text)
    except ParseError as exc:
        out.append(Finding(path, doc.front_matter[0] if doc.front_matter else 1, 1, "FM001",
                           f"skills-ref cannot read the front matter: {_first_line(exc)}"))
        return out
    except Exception as exc:  # the reference parser failing is a finding, not a crash
        out.append(Finding(path, 1, 1, "FM001", f"skills-ref's parser failed: {type(exc).__name__}"))
        return out
    for key in ("name", "description"):
        ours, their = data.get(key), theirs.get(key)
        if isinstance(ours, str) and isinstance(their, str) and ours.strip() != their.strip():
            out.append(Finding(path, _key_line(doc, key), 1, "FM001",
                               f"skills-ref reads {key} as {their.strip()[:60]!r}, not as written (its parser splits "
                               "the file at every '---': avoid '---' in the front matter)"))
    return out


def check_front_matter(doc: Document, fm: FrontMatter, install_name: str | None, install_problem: str | None) -> list[Finding]:
    """The spec's rules through ``skills-ref`` (:func:`spec_findings`), then the pack's own rules."""
    path = doc.path
    data = fm.data
    if not fm.ok:
        return []
    out = spec_findings(doc, data, None if install_problem else install_name)
    spec_codes = {f.code for f in out}
    name = data.get("name")
    nline = _key_line(doc, "name")
    # Pack rule: ASCII only (skills-ref accepts any Unicode letter; the strictest agents load a-z, 0-9, '-').
    if isinstance(name, str) and name and "FM003" not in spec_codes and not NAME_RE.match(name):
        out.append(Finding(path, nline, 1, "FM003", f"name {name!r} must use only a-z, 0-9 and '-' (ASCII)"))
    if install_problem:
        out.append(Finding(path, nline, 1, "FM004", install_problem))
    desc = data.get("description")
    if isinstance(desc, str) and ("<" in desc or ">" in desc):  # pack rule: agents embed it in XML-ish prompts
        out.append(Finding(path, _key_line(doc, "description"), 1, "FM005", "description must not contain '<' or '>'"))
    for key in ("license", "allowed-tools"):
        if key in data and not isinstance(data[key], str):
            out.append(Finding(path, _key_line(doc, key), 1, "FM007", f"{key} must be a string"))
    if "compatibility" in data and data["compatibility"] == "":
        out.append(Finding(path, _key_line(doc, "compatibility"), 1, "FM007", "compatibility must not be empty"))
    if "metadata" in data:
        meta = data["metadata"]
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            out.append(Finding(path, _key_line(doc, "metadata"), 1, "FM007",
                               "metadata must map strings to strings (quote numbers such as version: \"0.1.0\")"))
    body_lines = len(doc.lines) - (doc.front_matter[1] if doc.front_matter else 0)
    if body_lines >= MAX_BODY_LINES:
        out.append(Finding(path, doc.body_start, 1, "FM006", f"body has {body_lines} lines (keep it under {MAX_BODY_LINES})"))
    return out
