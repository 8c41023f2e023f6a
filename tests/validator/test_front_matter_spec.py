"""SKILL.md front matter: the spec's rules come from skills-ref, the pack's own rules stay, and skills-ref's gaps are covered."""

from __future__ import annotations

import pytest

from tests.validator.packbuilder import findings, write_manifest


def _front(pack, old: str, new: str):
    skill = pack / "SKILL.md"
    text = skill.read_text(encoding="utf-8")
    assert old in text
    skill.write_text(text.replace(old, new, 1), encoding="utf-8")
    try:
        write_manifest(pack)
    except Exception:  # broken front matter: the manifest cannot be written, validate reports why
        pass
    return [f for f in findings(pack) if f.path == "SKILL.md"]


@pytest.mark.parametrize("old,new,code", [
    ("name: mini-skill", "name: mini--skill", "FM003"),
    ("name: mini-skill", "name: Mini-Skill", "FM003"),
    ("name: mini-skill", "name: other-skill", "FM004"),
    ("license: Apache-2.0", "license: Apache-2.0\nowner: me", "FM002"),
    ("description: A small pack used by the validator tests.", "description: " + "d" * 1025, "FM005"),
    ("license: Apache-2.0", "license: Apache-2.0\ncompatibility: " + "c" * 501, "FM007"),
])
def test_spec_rules_come_from_skills_ref(pack, old, new, code):
    found = _front(pack, old, new)
    assert any(f.code == code and f.message.startswith("skills-ref") for f in found), [f.text() for f in found]


def test_unexpected_key_is_placed_on_its_line(pack):
    found = _front(pack, "license: Apache-2.0", "license: Apache-2.0\nowner: me")
    (fm002,) = [f for f in found if f.code == "FM002"]
    assert fm002.line == 5 and "'owner'" in fm002.message


def test_non_string_key_does_not_crash_skills_ref(pack):
    # skills-ref's validate_metadata sorts the keys and raises TypeError on int and str mixed.
    found = _front(pack, "license: Apache-2.0", "license: Apache-2.0\n1: one")
    assert "FM002" in {f.code for f in found}


def test_description_with_three_dashes_is_read_differently_by_skills_ref(pack):
    # skills-ref 0.1.1 splits the file at every '---': it would read this description as 'A small'.
    found = _front(pack, "A small pack used", "A small --- pack used")
    assert any(f.code == "FM001" and "skills-ref reads description" in f.message for f in found)


def test_front_matter_skills_ref_cannot_read(pack):
    # Valid YAML, but strictyaml (skills-ref's parser) refuses flow mappings.
    found = _front(pack, 'metadata:\n  version: "1.2.3"', 'metadata: {version: "1.2.3"}')
    assert any(f.code == "FM001" and "skills-ref cannot read" in f.message for f in found)


def test_pack_rule_ascii_name(pack):
    # skills-ref accepts any lowercase Unicode letter; the pack keeps names ASCII.
    found = _front(pack, "name: mini-skill", "name: mini-skïll")
    assert [f.code for f in found if f.code == "FM003"] == ["FM003"]
    assert not any(f.message.startswith("skills-ref") for f in found if f.code == "FM003")


@pytest.mark.parametrize("old,new,code", [
    ("A small pack used", "A <small> pack used", "FM005"),
    ('  version: "1.2.3"', "  version: 1.2", "FM007"),
    ("license: Apache-2.0", "license: 2", "FM007"),
])
def test_pack_rules_stay(pack, old, new, code):
    found = _front(pack, old, new)
    assert any(f.code == code and not f.message.startswith("skills-ref") for f in found), [f.text() for f in found]


def test_clean_front_matter_has_no_findings(pack):
    assert [f for f in findings(pack) if f.path == "SKILL.md"] == []
