"""manifest.json: generate it from the pack, detect drift, and validate it against its JSON Schema.

Files are read as bytes (size and SHA-256 of exactly what is committed);
nothing is normalised. Output is deterministic: sorted keys and files, two
space indent, UTF-8, trailing newline.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from rtm_lakebase.check.findings import Finding

from .frontmatter import parse_front_matter
from .markdown import Document, parse
from .packfiles import pack_files
from .readfile import load_json, read_pack_bytes, read_pack_text, write_atomically
from .routing import read_when_map

MARKER = "by scripts/skills.py generate — do not edit"
MANIFEST = "manifest.json"
SCHEMA = "schemas/manifest.schema.json"


class PackError(Exception):
    """The pack cannot be described (e.g. SKILL.md missing or unreadable); carries findings."""

    def __init__(self, findings: list[Finding]):
        super().__init__("; ".join(f.text() for f in findings))
        self.findings = findings


def read_text(root: Path, rel: str) -> tuple[str | None, Finding | None]:
    return read_pack_text(root, rel)


def _first_h1(doc: Document) -> str:
    for h in doc.headings:
        if h.level == 1:
            return h.text
    return ""


def _docstring_summary(source: str) -> str:
    try:
        doc = ast.get_docstring(ast.parse(source))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""


def _project_version(root: Path) -> str:
    try:
        text, _ = read_pack_text(root, "pyproject.toml")
        return str(tomllib.loads(text)["project"]["version"])
    except (TypeError, KeyError, AttributeError, RecursionError, tomllib.TOMLDecodeError):
        return "0.0.0"


def build_manifest(root: Path) -> dict[str, Any]:
    """The manifest `generate` writes; raises PackError when SKILL.md or a pack file cannot be read."""
    problems: list[Finding] = []
    if not os.path.lexists(root / "SKILL.md"):
        raise PackError([Finding("SKILL.md", 1, 1, "PACK001", "SKILL.md not found at the pack root")])
    text, err = read_text(root, "SKILL.md")
    if err:
        raise PackError([err])
    skill_doc = parse("SKILL.md", text)
    fm, fm_findings = parse_front_matter(skill_doc)
    if fm_findings:
        raise PackError(fm_findings)
    meta = fm.data.get("metadata") if isinstance(fm.data.get("metadata"), dict) else {}
    version = meta.get("version") if isinstance(meta.get("version"), str) else _project_version(root)
    read_when = read_when_map(skill_doc)
    files = []
    for rel, role in pack_files(root):
        data, problem = read_pack_bytes(root, rel)
        if problem:
            problems.append(problem)
            continue
        entry: dict[str, Any] = {"path": rel, "role": role, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if role in ("reference", "example"):
            try:
                decoded = data.decode("utf-8")
            except UnicodeDecodeError:
                problems.append(read_text(root, rel)[1])
                continue
            if role == "reference":
                entry["title"] = _first_h1(parse(rel, decoded))
                entry["read_when"] = read_when.get(rel, "")
            else:
                entry["summary"] = _docstring_summary(decoded)
        files.append(entry)
    if problems:
        raise PackError(problems)
    return {
        "generated": MARKER,
        "skill": {
            "name": str(fm.data.get("name", "")),
            "description": str(fm.data.get("description", "")),
            "version": version,
        },
        "files": files,
    }


def dumps(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def write_manifest(root: Path) -> Path:
    target = root / MANIFEST
    write_atomically(target, dumps(build_manifest(root)))
    return target


def load_schema(root: Path) -> tuple[dict | None, list[Finding]]:
    if not (root / SCHEMA).exists() and not (root / SCHEMA).is_symlink():
        return None, [Finding(SCHEMA, 1, 1, "MAN005", "manifest schema not found")]
    schema, _, problem = load_json(root, SCHEMA, "MAN005")
    if problem:
        return None, [problem]
    if not isinstance(schema, dict):
        return None, [Finding(SCHEMA, 1, 1, "MAN005", "schema must be a JSON object")]
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return None, [Finding(SCHEMA, 1, 1, "MAN005", f"not a valid draft 2020-12 schema: {exc.message}")]
    except (RecursionError, MemoryError) as exc:
        return None, [Finding(SCHEMA, 1, 1, "MAN005", f"schema cannot be checked: {type(exc).__name__}")]
    if schema.get("$schema") != "https://json-schema.org/draft/2020-12/schema":
        return None, [Finding(SCHEMA, 1, 1, "MAN005", "schema must declare $schema draft 2020-12")]
    return schema, []


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _diff(current: Any, expected: dict[str, Any]) -> str:
    if not isinstance(current, dict):
        return "the manifest is not a JSON object"
    for key in ("generated", "skill"):
        if current.get(key) != expected.get(key):
            return f"{key!r} differs"
    cur = {f.get("path"): f for f in current.get("files", []) if isinstance(f, dict)}
    exp = {f["path"]: f for f in expected["files"]}
    for path in sorted(set(cur) | set(exp), key=str):
        if path not in cur:
            return f"{path} is missing from the manifest"
        if path not in exp:
            return f"{path} is listed but is not a pack file"
        if cur[path] != exp[path]:
            keys = sorted(k for k in set(cur[path]) | set(exp[path]) if cur[path].get(k) != exp[path].get(k))
            return f"{path}: {', '.join(keys)} differ"
    if [f.get("path") for f in current.get("files", []) if isinstance(f, dict)] != list(exp):
        return "files are not in sorted order"
    return "formatting differs"


def check_manifest(root: Path) -> list[Finding]:
    out: list[Finding] = []
    schema, schema_findings = load_schema(root)
    out += schema_findings
    path = root / MANIFEST
    if not path.exists() and not path.is_symlink():
        return out + [Finding(MANIFEST, 1, 1, "MAN001", "manifest.json not found; run `python scripts/skills.py generate`")]
    current, raw, problem = load_json(root, MANIFEST, "MAN002")
    if problem and problem.code != "MAN002":
        return out + [problem]
    if problem:
        out.append(problem)
    elif schema is not None:
        validator = Draft202012Validator(schema)
        try:
            errors = sorted(validator.iter_errors(current), key=lambda e: list(map(str, e.absolute_path)))
        except (RecursionError, MemoryError) as exc:
            errors = []
            out.append(Finding(MANIFEST, 1, 1, "MAN003", f"cannot be checked against the schema: {type(exc).__name__}"))
        for err in errors:
            where = "/".join(str(p) for p in err.absolute_path) or "(root)"
            out.append(Finding(MANIFEST, 1, 1, "MAN003", f"{where}: {_short(err.message)}"))
    try:
        expected = build_manifest(root)
    except PackError:
        return out  # the causes are reported by the other checks
    if problem:
        return out
    if raw != dumps(expected):
        out.append(Finding(MANIFEST, 1, 1, "MAN004",
                           f"out of date ({_diff(current, expected)}); run `python scripts/skills.py generate`"))
    return out
