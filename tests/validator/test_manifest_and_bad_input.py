"""Manifest content, schema, drift, and bad input to the validator (clear findings, never a traceback)."""

from __future__ import annotations

import hashlib
import json

import pytest
from jsonschema import Draft202012Validator

from skillcheck.manifest import MARKER, build_manifest, dumps
from tests.validator.packbuilder import REPO, codes, findings, write_manifest


def test_committed_schema_is_valid_and_closed():
    schema = json.loads((REPO / "schemas" / "manifest.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"

    def objects(node):
        if isinstance(node, dict):
            if node.get("type") == "object":
                yield node
            for v in node.values():
                yield from objects(v)
        elif isinstance(node, list):
            for v in node:
                yield from objects(v)

    found = list(objects(schema))
    assert len(found) >= 3
    assert all(o.get("additionalProperties") is False for o in found)


def test_manifest_content(pack):
    m = json.loads((pack / "manifest.json").read_text())
    assert m["generated"] == MARKER
    assert m["skill"] == {"name": "mini-skill", "description": "A small pack used by the validator tests.", "version": "1.2.3"}
    by_path = {f["path"]: f for f in m["files"]}
    assert list(by_path) == sorted(by_path)
    assert by_path["SKILL.md"]["role"] == "skill"
    assert by_path["references/guide.md"] | {} == {
        "path": "references/guide.md", "role": "reference", "title": "Guide", "read_when": "Writing a real-time query.",
        "size": (pack / "references/guide.md").stat().st_size,
        "sha256": hashlib.sha256((pack / "references/guide.md").read_bytes()).hexdigest()}
    assert by_path["examples/snippets.py"]["summary"] == "Small example module for the validator tests."
    assert by_path["schemas/manifest.schema.json"]["role"] == "schema"


def test_manifest_reads_bytes_without_normalising(pack):
    p = pack / "references" / "guide.md"
    p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    entry = next(f for f in build_manifest(pack)["files"] if f["path"] == "references/guide.md")
    assert entry["sha256"] == hashlib.sha256(p.read_bytes()).hexdigest()
    assert entry["size"] == len(p.read_bytes())


def test_version_falls_back_to_pyproject(pack):
    s = (pack / "SKILL.md").read_text().replace('metadata:\n  version: "1.2.3"\n', "")
    (pack / "SKILL.md").write_text(s)
    assert build_manifest(pack)["skill"]["version"] == "0.3.0"


def test_tool_files_are_in_the_real_manifest_listing():
    roles = {f["path"]: f["role"] for f in build_manifest(REPO)["files"]}
    assert roles["scripts/skills.py"] == "tool"
    assert roles["scripts/skillcheck/validate.py"] == "tool"
    assert roles["schemas/manifest.schema.json"] == "schema"
    assert not any("__pycache__" in p or p.startswith("tests/") for p in roles)


@pytest.mark.parametrize("mutate,message", [
    (lambda m: m["files"][0].update(sha256="XYZ"), "does not match"),
    (lambda m: m["files"][0].update(role="misc"), "is not one of"),
    (lambda m: m["files"][0].update(notes="hi"), "Additional properties"),
    (lambda m: m["skill"].pop("version"), "'version' is a required property"),
    (lambda m: m.update(generated="by hand"), "was expected"),
    (lambda m: next(f for f in m["files"] if f["role"] == "reference").pop("read_when"), "'read_when' is a required"),
])
def test_schema_violations(pack, mutate, message):
    m = json.loads((pack / "manifest.json").read_text())
    mutate(m)
    (pack / "manifest.json").write_bytes(dumps(m))
    found = [f for f in findings(pack) if f.code == "MAN003"]
    assert found and any(message in f.message for f in found), [f.text() for f in found]


def test_drift_names_the_changed_file(pack):
    (pack / "examples" / "snippets.py").write_text((pack / "examples" / "snippets.py").read_text() + "\nX = 1\n")
    (drift,) = [f for f in findings(pack) if f.code == "MAN004"]
    assert "examples/snippets.py" in drift.message and "generate" in drift.message


def test_drift_on_new_and_removed_files(pack):
    (pack / "examples" / "extra.py").write_text('"""Extra."""\n')
    assert any("examples/extra.py is missing" in f.message for f in findings(pack) if f.code == "MAN004")
    write_manifest(pack)
    (pack / "examples" / "extra.py").unlink()
    assert any("not a pack file" in f.message for f in findings(pack) if f.code == "MAN004")


def test_drift_on_formatting_only(pack):
    m = json.loads((pack / "manifest.json").read_text())
    (pack / "manifest.json").write_text(json.dumps(m))
    (drift,) = [f for f in findings(pack) if f.code == "MAN004"]
    assert "formatting" in drift.message


def test_missing_pyproject_install_name(pack):
    (pack / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1"\n')
    (f,) = [f for f in findings(pack) if f.code == "FM004"]
    assert "install-name" in f.message


def test_broken_pyproject(pack):
    (pack / "pyproject.toml").write_text("[tool.skill\n")
    assert "FM004" in codes(pack)


def test_front_matter_not_a_mapping(pack):
    (pack / "SKILL.md").write_text("---\n- just\n- a list\n---\n\n# Mini\n")
    assert "FM001" in codes(pack)


def test_front_matter_missing(pack):
    (pack / "SKILL.md").write_text("# Mini skill\n\nNo front matter.\n")
    assert "FM001" in codes(pack)


def test_unreadable_file_is_a_finding(pack):
    target = pack / "references" / "broken.md"
    target.mkdir()  # a directory where a file is expected: reading it fails even as root
    result = findings(pack)
    assert any(f.code == "PACK003" and f.path == "references/broken.md" for f in result), [f.text() for f in result]


def test_undecodable_example_module(pack):
    (pack / "examples" / "latin.py").write_bytes(b'"""Caf\xe9."""\n')
    assert any(f.code == "PACK002" and f.path == "examples/latin.py" for f in findings(pack))


def test_manifest_not_utf8(pack):
    (pack / "manifest.json").write_bytes(b"\xff\xfe{}")
    assert "MAN002" in codes(pack)


def test_manifest_is_a_list(pack):
    (pack / "manifest.json").write_text("[]\n")
    result = codes(pack)
    assert "MAN003" in result and "MAN004" in result


def test_schema_missing(pack):
    (pack / "schemas" / "manifest.schema.json").unlink()
    assert "MAN005" in codes(pack)


def test_empty_pack_directory(tmp_path):
    result = codes(tmp_path)
    assert "PACK001" in result and "MAN001" in result


def test_stable_formatting_bytes(pack):
    a = dumps(build_manifest(pack))
    b = dumps(build_manifest(pack))
    assert a == b and a.endswith(b"\n") and b'  "files": [' in a
