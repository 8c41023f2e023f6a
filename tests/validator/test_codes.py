"""Every registered code has a positive and a negative fixture, and each behaves as expected."""

from __future__ import annotations

import shutil

import pytest

from skillcheck.codes import CODES
from skillcheck.external import run_markdownlint, run_mkdocs
from tests.validator.cases import CASES, EXTERNAL
from tests.validator.packbuilder import REPO, codes, findings, make_pack


def test_every_code_has_fixtures():
    assert set(CASES) | EXTERNAL == set(CODES)
    assert not set(CASES) & EXTERNAL


def test_clean_pack_has_no_findings(pack):
    assert [f.text() for f in findings(pack)] == []


@pytest.mark.parametrize("code", sorted(CASES))
def test_positive_fixture_reports_code(code, pack):
    positive, _ = CASES[code]
    positive(pack)
    found = findings(pack)
    assert code in {f.code for f in found}, [f.text() for f in found]


@pytest.mark.parametrize("code", sorted(CASES))
def test_negative_fixture_does_not(code, pack):
    _, negative = CASES[code]
    negative(pack)
    found = findings(pack)
    assert code not in {f.code for f in found}, [f.text() for f in found]


# --- external tools ---------------------------------------------------------------------------

def _lint_pack(pack):
    shutil.copy(REPO / ".markdownlint.yaml", pack / ".markdownlint.yaml")
    (pack / "node_modules").symlink_to(REPO / "node_modules")
    return pack


def test_ext001_markdownlint_positive(pack):
    _lint_pack(pack)
    (pack / "references" / "guide.md").write_text("# Guide\n\nTrailing spaces here.   \n\n# Second title\n", encoding="utf-8")
    found = run_markdownlint(pack, ["references/guide.md"])
    assert {(f.path, f.code) for f in found} == {("references/guide.md", "EXT001")}
    lines = {f.line for f in found}
    assert 3 in lines and 5 in lines  # MD009 trailing spaces, MD025 second H1
    assert any("MD009" in f.message for f in found)


def test_ext001_markdownlint_negative(pack):
    _lint_pack(pack)
    files = ["SKILL.md", "references/guide.md"]
    assert run_markdownlint(pack, files) == []


def test_ext002_mkdocs_positive(pack):
    (pack / "site_docs").mkdir()
    (pack / "site_docs" / "index.md").write_text("# Home\n\nSee [nowhere](missing.md).\n", encoding="utf-8")
    (pack / "mkdocs.yml").write_text("site_name: Mini\ndocs_dir: site_docs\n", encoding="utf-8")
    found = run_mkdocs(pack)
    assert found and {f.code for f in found} == {"EXT002"}
    assert any("missing.md" in f.message for f in found)


def test_ext002_mkdocs_negative(pack):
    (pack / "site_docs").mkdir()
    (pack / "site_docs" / "index.md").write_text("# Home\n\nSee [home](index.md).\n", encoding="utf-8")
    (pack / "mkdocs.yml").write_text("site_name: Mini\ndocs_dir: site_docs\n", encoding="utf-8")
    assert run_mkdocs(pack) == []


def test_ext002_missing_mkdocs_config(pack):
    assert [f.code for f in run_mkdocs(pack)] == ["EXT002"]


def test_ext003_missing_markdownlint(pack, monkeypatch):
    monkeypatch.setenv("PATH", str(pack / "no-bin"))
    found = run_markdownlint(pack, ["references/guide.md"])
    assert [f.code for f in found] == ["EXT003"]
    assert "npm ci" in found[0].message


def test_ext003_negative_when_installed(pack):
    _lint_pack(pack)
    assert "EXT003" not in {f.code for f in run_markdownlint(pack, ["references/guide.md"])}


def test_full_validate_with_external_tools(pack):
    _lint_pack(pack)
    (pack / "site_docs").mkdir()
    (pack / "site_docs" / "index.md").write_text("# Home\n\nHello.\n", encoding="utf-8")
    (pack / "mkdocs.yml").write_text("site_name: Mini\ndocs_dir: site_docs\n", encoding="utf-8")
    make_pack(pack)  # regenerate the manifest
    assert codes(pack, external=True) == []


def test_mkdocs_output_is_placed_on_files(pack):
    from skillcheck.external import parse_mkdocs_output

    (pack / "mkdocs.yml").write_text("site_name: Mini\ndocs_dir: site_docs\n", encoding="utf-8")
    (pack / "site_docs").mkdir()
    (pack / "site_docs" / "index.md").write_text("# Home\n\nText.\n\nSee [x](references/gone.md).\n", encoding="utf-8")
    output = (  # as printed by mkdocs 1.6.1 --strict
        "INFO    -  Cleaning site directory\n"
        "WARNING -  The following pages exist in the docs directory, but are not included in the \"nav\" configuration:\n"
        "  - extra/README.md\n"
        "WARNING -  A reference to 'references/gone.md' is included in the 'nav' configuration, which is not found in the documentation files.\n"
        "WARNING -  Doc file 'index.md' contains a link 'references/gone.md', but the target is not found among documentation files.\n"
        "\nAborted with 3 warnings in strict mode!\n")
    found = parse_mkdocs_output(pack, pack / "mkdocs.yml", output)
    assert [(f.path, f.line, f.code) for f in found] == [
        ("mkdocs.yml", 1, "EXT002"), ("mkdocs.yml", 1, "EXT002"), ("site_docs/index.md", 5, "EXT002")]
    assert "extra/README.md" in found[0].message
