"""Installing the skill: the packaged folder, each assistant's install path, and the manifest checks.

Each assistant's path is laid out as the tool lays it out, in a temporary home:

- Claude Code personal skill: ``~/.claude/skills/<name>/`` (the packaged folder);
- Claude Code plugin: the marketplace in ``.claude-plugin/marketplace.json`` names a
  source folder, whose ``.claude-plugin/plugin.json`` names the skills path; the
  plugin is copied into ``~/.claude/plugins/cache/<marketplace>/<plugin>/<version>/``;
- Codex plugin: ``.agents/plugins/marketplace.json`` → ``source.path`` → ``.codex-plugin/plugin.json``
  → ``skills``, copied into ``~/.codex/plugins/cache/...``; Codex walks the skills path
  for SKILL.md files and reads ``agents/openai.yaml`` beside each;
- Codex user skill: ``~/.agents/skills/<name>/``; Cursor: ``~/.cursor/skills/<name>/``.

In every case SKILL.md must be where the manifests lead, carry the name the
folder and manifests use, and every reference it routes to (and every relative
link in them) must resolve inside the installed skill.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.codes import CODES
from skillcheck.markdown import parse
from skillcheck.package import build_package, check_package, install_files
from skillcheck.plugin_manifests import MANIFESTS, check_plugin_manifests, skill_files_under

NAME = "spark-rtm-lakebase"
_CLONE_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cache", "node_modules", "site", "dist", "__pycache__",
                                       "*.egg-info", "test-artifacts", ".pytest_cache")


def front_matter_name(skill_md: Path) -> str:
    text = skill_md.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])["name"]


def assert_skill_complete(skill_dir: Path) -> None:
    """SKILL.md with the right name, every reference it routes to present, every relative link inside."""
    skill = skill_dir / "SKILL.md"
    assert skill.is_file(), f"no SKILL.md in {skill_dir}"
    assert front_matter_name(skill) == NAME
    routed = {link.target.split("#")[0] for link in parse("SKILL.md", skill.read_text(encoding="utf-8")).links
              if link.target.startswith("references/")}
    assert routed == {f"references/{p.name}" for p in (REPO / "references").glob("*.md")}
    for rel in routed:
        assert (skill_dir / rel).is_file(), rel
        doc = parse(rel, (skill_dir / rel).read_text(encoding="utf-8"))
        for link in doc.links:  # links between references and to the user's package resolve here too
            target = link.target.split("#")[0]
            if target and not target.startswith(("http://", "https://", "mailto:")):
                assert (skill_dir / "references" / target).resolve().exists(), (rel, link.target)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "skills.py"), "package", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return out / NAME, out / f"{NAME}.zip"


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """What `git clone` or a plugin manager's checkout gives: the repository without local build state."""
    return Path(shutil.copytree(REPO, tmp_path_factory.mktemp("clone") / "pack", ignore=_CLONE_IGNORE))


# --- the packaged folder -------------------------------------------------------------------------

def test_package_holds_the_skill_the_users_package_and_examples_only(package):
    folder, _zip = package
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == install_files(REPO)
    assert "SKILL.md" in files and "agents/openai.yaml" in files
    assert {f.split("/")[0] for f in files} == {"SKILL.md", "agents", "references", "rtm_lakebase", "examples"}
    assert "rtm_lakebase/sink/writer.py" in files and "examples/kafka_to_lakebase_upsert.py" in files
    # the JVM sink ships as source (the user compiles it), never as a build output
    assert "rtm_lakebase/jvm/PostgresForeachWriter.java" in files
    assert not [f for f in files if f.endswith((".jar", ".class", ".pyc"))]


def test_zip_holds_the_same_folder_under_its_install_name(package):
    folder, zip_path = package
    names = sorted(zipfile.ZipFile(zip_path).namelist())
    assert names == sorted(f"{NAME}/{p.relative_to(folder).as_posix()}" for p in folder.rglob("*") if p.is_file())
    with zipfile.ZipFile(zip_path) as zf:
        assert zf.read(f"{NAME}/SKILL.md") == (folder / "SKILL.md").read_bytes()


def test_package_is_reproducible(tmp_path, package):
    _folder, zip_path = package
    _f2, zip2 = build_package(REPO, tmp_path)
    assert zip2.read_bytes() == zip_path.read_bytes()


def test_every_relative_link_in_the_package_resolves_inside_it(package):
    folder, _zip = package
    assert check_package(folder) == []
    lab_links = 0
    for md in folder.rglob("*.md"):
        rel = md.relative_to(folder).as_posix()
        for link in parse(rel, md.read_text(encoding="utf-8")).links:
            assert "pack_lab/" not in link.target or link.target.startswith("https://"), (rel, link.target)
            lab_links += "pack_lab/" in link.target
    assert lab_links > 0, "the references link lab modules; they must be rewritten to repository URLs"


def test_package_check_catches_a_link_leaving_the_installed_folder(package, tmp_path):
    folder, _zip = package
    broken = Path(shutil.copytree(folder, tmp_path / NAME))
    ref = broken / "references" / "kafka-streaming.md"
    ref.write_text(ref.read_text(encoding="utf-8") + "\nSee [the lab](../pack_lab/rtm_lab.py).\n", encoding="utf-8")
    found = check_package(broken)
    assert [(f.path, f.code) for f in found] == [("references/kafka-streaming.md", "PKG001")]


def test_package_refuses_a_leaving_link_without_a_repository_url(clone, tmp_path):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    pyproject = pack / "pyproject.toml"
    pyproject.write_text("\n".join(line for line in pyproject.read_text().splitlines()
                                   if not line.startswith("Repository =")) + "\n")
    proc = subprocess.run([sys.executable, str(pack / "scripts" / "skills.py"), "package", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "[project.urls] Repository" in proc.stderr
    assert not (tmp_path / "out" / NAME).exists()  # nothing half-built left behind
    assert [p.name for p in (tmp_path / "out").iterdir()] == []


# --- each assistant's install path ---------------------------------------------------------------

@pytest.mark.parametrize("skills_dir", [".claude/skills", ".agents/skills", ".cursor/skills"],
                         ids=["claude-code-personal", "codex-user", "cursor"])
def test_packaged_folder_installs_as_a_personal_skill(package, tmp_path, skills_dir):
    folder, zip_path = package
    home = tmp_path / "home"
    (home / skills_dir).mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as zf:  # unzip, as a user installing the release zip does
        zf.extractall(home / skills_dir)
    installed = home / skills_dir / NAME
    assert_skill_complete(installed)
    assert check_package(installed) == []
    if skills_dir == ".agents/skills":
        meta = yaml.safe_load((installed / "agents" / "openai.yaml").read_text())
        assert f"${NAME}" in meta["interface"]["default_prompt"]


def _install_plugin(clone: Path, home: Path, marketplace_rel: str, manifest_rel: str, cache: str) -> Path:
    market = json.loads((clone / marketplace_rel).read_text())
    (entry,) = [p for p in market["plugins"] if p["name"] == NAME]
    source = entry["source"] if isinstance(entry["source"], str) else entry["source"]["path"]
    market_root = clone  # both marketplaces sit at the repository root
    plugin_src = (market_root / source).resolve()
    manifest = json.loads((plugin_src / manifest_rel).read_text())
    assert manifest["name"] == NAME == entry["name"]
    dest = home / cache / market["name"] / NAME / manifest["version"]
    shutil.copytree(plugin_src, dest)
    return dest


def test_claude_code_plugin_from_the_marketplace(clone, tmp_path):
    dest = _install_plugin(clone, tmp_path / "home", ".claude-plugin/marketplace.json",
                           ".claude-plugin/plugin.json", ".claude/plugins/cache")
    manifest = json.loads((dest / ".claude-plugin" / "plugin.json").read_text())
    for skills_path in manifest["skills"]:
        skill_dir = (dest / skills_path).resolve()
        assert_skill_complete(skill_dir)
        assert skill_files_under(skill_dir) == [skill_dir / "SKILL.md"]


def test_codex_plugin_from_the_marketplace(clone, tmp_path):
    dest = _install_plugin(clone, tmp_path / "home", ".agents/plugins/marketplace.json",
                           ".codex-plugin/plugin.json", ".codex/plugins/cache")
    manifest = json.loads((dest / ".codex-plugin" / "plugin.json").read_text())
    found = skill_files_under((dest / manifest["skills"]).resolve())  # Codex walks the skills path
    assert [p.relative_to(dest).as_posix() for p in found] == ["SKILL.md"]
    skill_dir = found[0].parent
    assert_skill_complete(skill_dir)
    meta = yaml.safe_load((skill_dir / "agents" / "openai.yaml").read_text())
    assert meta["interface"]["display_name"] == manifest["interface"]["displayName"]


def test_cursor_plugin_manifest_points_at_the_skill(clone):
    manifest = json.loads((clone / ".cursor-plugin" / "plugin.json").read_text())
    assert manifest["name"] == NAME
    assert_skill_complete((clone / manifest["skills"]).resolve())


def test_every_manifest_version_is_the_project_version(clone):
    import tomllib

    version = tomllib.loads((clone / "pyproject.toml").read_text())["project"]["version"]
    for rel in (".claude-plugin/plugin.json", ".codex-plugin/plugin.json", ".cursor-plugin/plugin.json"):
        assert json.loads((clone / rel).read_text())["version"] == version, rel
    market = json.loads((clone / ".claude-plugin" / "marketplace.json").read_text())
    assert market["metadata"]["version"] == version
    assert all(p["version"] == version for p in market["plugins"])


# --- the manifest rules (PLUG001-006): positive and negative fixtures ----------------------------

def test_real_pack_manifests_are_clean_and_all_present():
    for m in MANIFESTS:
        assert (REPO / m.path).is_file(), m.path
    assert check_plugin_manifests(REPO) == []


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


MUTATIONS = {
    "PLUG001": lambda p: (p / ".codex-plugin/plugin.json").write_text('{"name": "spark-rtm-lakebase",'),
    "PLUG002": lambda p: _edit_json(p / ".agents/plugins/marketplace.json",
                                    lambda d: d["plugins"][0]["policy"].update(installation="MAYBE")),
    "PLUG003": lambda p: _edit_json(p / ".claude-plugin/plugin.json", lambda d: d.update(name="other-skill")),
    "PLUG004": lambda p: _edit_json(p / ".cursor-plugin/plugin.json", lambda d: d.update(version="9.9.9")),
    "PLUG005": lambda p: _edit_json(p / ".claude-plugin/plugin.json", lambda d: d.update(skills=["./nowhere"])),
    "PLUG006": lambda p: (p / "examples" / "nested").mkdir() or shutil.copy(p / "SKILL.md", p / "examples/nested/SKILL.md"),
}


@pytest.mark.parametrize("code", sorted(MUTATIONS))
def test_manifest_rule_fires_on_its_fixture(clone, tmp_path, code):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    assert check_plugin_manifests(pack) == []  # positive: the unmodified copy is clean
    MUTATIONS[code](pack)
    found = {f.code for f in check_plugin_manifests(pack)}
    assert found == {code}, found
    assert code in CODES


def test_codex_prompt_must_invoke_the_skill_by_name(clone, tmp_path):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    meta = pack / "agents" / "openai.yaml"
    meta.write_text(meta.read_text().replace(f"${NAME}", "$some-other-skill"))
    assert [(f.path, f.code) for f in check_plugin_manifests(pack)] == [("agents/openai.yaml", "PLUG003")]


def test_marketplace_source_without_a_plugin_manifest_is_reported(clone, tmp_path):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    (pack / "elsewhere").mkdir()
    _edit_json(pack / ".claude-plugin/marketplace.json", lambda d: d["plugins"][0].update(source="./elsewhere"))
    found = [(f.path, f.code, f.message) for f in check_plugin_manifests(pack)]
    assert [(p, c) for p, c, _ in found] == [(".claude-plugin/marketplace.json", "PLUG005")]
    assert ".claude-plugin/plugin.json" in found[0][2]


def test_validate_reports_manifest_findings_with_a_clear_line(clone, tmp_path):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    MUTATIONS["PLUG004"](pack)
    proc = subprocess.run([sys.executable, str(pack / "scripts" / "skills.py"), "validate", "--no-external",
                           "--root", str(pack)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert ".cursor-plugin/plugin.json:" in proc.stdout and "PLUG004" in proc.stdout


# --- the README's and the site's install steps name what the manifests define --------------------

def _install_lines(rel: str) -> list[str]:
    doc = parse(rel, (REPO / rel).read_text(encoding="utf-8"))
    return [line.strip() for b in doc.blocks for line in b.lines
            if line.strip().startswith(("/plugin ", "codex plugin", "bash scripts/package.sh"))]


def test_readme_and_getting_started_give_the_same_install_commands():
    readme, site = _install_lines("README.md"), _install_lines("docs/getting-started.md")
    strip = [line.split("#")[0].strip() for line in readme]
    assert strip == [line.split("#")[0].strip() for line in site] and len(strip) == 4, (readme, site)


def test_install_commands_name_the_manifests_plugin_marketplace_and_repository():
    import tomllib

    repo_url = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    claude_market = json.loads((REPO / ".claude-plugin/marketplace.json").read_text())
    lines = _install_lines("README.md")
    assert f"/plugin marketplace add {repo_url}.git" in lines
    assert f"/plugin install {NAME}@{claude_market['name']}" in lines
    assert f"codex plugin marketplace add {repo_url}.git" in lines
    for rel in ("README.md", "docs/getting-started.md"):
        text = (REPO / rel).read_text(encoding="utf-8")
        for skills_dir in ("~/.claude/skills/", "~/.agents/skills/", "~/.cursor/skills/"):
            assert f"cp -r dist/{NAME} {skills_dir}" in text, (rel, skills_dir)
