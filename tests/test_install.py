"""Installing the skill: the packaged folder, each assistant's install path, and the manifest checks.

Each assistant's path is laid out as the tool lays it out, in a temporary home:

- Claude Code personal skill: ``~/.claude/skills/<name>/`` (the packaged folder);
- Claude Code plugin: the marketplace in ``.claude-plugin/marketplace.json`` names the
  generated plugin folder ``plugins/<name>/``, whose ``skills/`` Claude loads by default; the
  plugin is copied into ``~/.claude/plugins/cache/<marketplace>/<plugin>/<version>/``;
- Codex plugin: ``.agents/plugins/marketplace.json`` → ``source.path`` → ``.codex-plugin/plugin.json``
  → ``skills`` (``./skills/``), copied into ``~/.codex/plugins/cache/...``; Codex walks the skills path
  for SKILL.md files and reads ``agents/openai.yaml`` beside each;
- Cursor plugin: ``.cursor-plugin/marketplace.json`` → ``source`` → ``.cursor-plugin/plugin.json`` → ``skills``;
- Codex user skill: ``~/.agents/skills/<name>/``; Cursor: ``~/.cursor/skills/<name>/``.

tests/clients/ runs the real clients on the same routes.

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
from skillcheck.package import build_package, build_plugin, check_package, check_plugin_drift, install_files
from skillcheck.plugin_manifests import MANIFESTS, check_plugin_manifests, manifests_for, skill_files_under

NAME = "spark-rtm-lakebase"
PLUGIN = f"plugins/{NAME}"
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
    assert {f.split("/")[0] for f in files} == {"SKILL.md", "LICENSE", "agents", "references", "rtm_lakebase",
                                                "examples"}
    assert "rtm_lakebase/sink/writer.py" in files and "examples/kafka_to_lakebase_upsert.py" in files
    # the JVM sink ships as source (the user compiles it), never as a build output
    assert "rtm_lakebase/jvm/PostgresForeachWriter.java" in files
    assert "rtm_lakebase/foreach/LowLatencyPythonForeachWriter.java" in files  # the fast foreach writer too
    assert "rtm_lakebase/sink/outcomes.json" in files  # the failure outcomes both sinks read (and the jar holds)
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
    # the plugin folder holds the manifests and the skill, nothing a client would read as something else
    assert sorted(p.name for p in dest.iterdir()) == [".claude-plugin", ".codex-plugin", ".cursor-plugin", "skills"]
    return dest


def test_claude_code_plugin_from_the_marketplace(clone, tmp_path):
    dest = _install_plugin(clone, tmp_path / "home", ".claude-plugin/marketplace.json",
                           ".claude-plugin/plugin.json", ".claude/plugins/cache")
    manifest = json.loads((dest / ".claude-plugin" / "plugin.json").read_text())
    assert "skills" not in manifest  # Claude Code loads the plugin's skills/ folder by default
    found = skill_files_under(dest / "skills")
    assert [p.relative_to(dest).as_posix() for p in found] == [f"skills/{NAME}/SKILL.md"]
    assert_skill_complete(found[0].parent)


def test_codex_plugin_from_the_marketplace(clone, tmp_path):
    dest = _install_plugin(clone, tmp_path / "home", ".agents/plugins/marketplace.json",
                           ".codex-plugin/plugin.json", ".codex/plugins/cache")
    manifest = json.loads((dest / ".codex-plugin" / "plugin.json").read_text())
    assert manifest["skills"] == "./skills/"  # never "./": Codex ignores that (tests/clients proves it)
    found = skill_files_under((dest / manifest["skills"]).resolve())  # Codex walks the skills path
    assert [p.relative_to(dest).as_posix() for p in found] == [f"skills/{NAME}/SKILL.md"]
    skill_dir = found[0].parent
    assert_skill_complete(skill_dir)
    meta = yaml.safe_load((skill_dir / "agents" / "openai.yaml").read_text())
    assert meta["interface"]["display_name"] == manifest["interface"]["displayName"]


def test_cursor_plugin_from_the_marketplace(clone):
    market = json.loads((clone / ".cursor-plugin" / "marketplace.json").read_text())
    (entry,) = market["plugins"]
    manifest = json.loads((clone / entry["source"] / ".cursor-plugin" / "plugin.json").read_text())
    assert manifest["name"] == NAME == entry["name"]
    found = skill_files_under(clone / entry["source"] / manifest["skills"])
    assert len(found) == 1
    assert_skill_complete(found[0].parent)


def test_every_manifest_version_is_the_project_version(clone):
    import tomllib

    version = tomllib.loads((clone / "pyproject.toml").read_text())["project"]["version"]
    for rel in (".claude-plugin/plugin.json", ".codex-plugin/plugin.json", ".cursor-plugin/plugin.json"):
        assert json.loads((clone / PLUGIN / rel).read_text())["version"] == version, rel
    market = json.loads((clone / ".claude-plugin" / "marketplace.json").read_text())
    assert market["metadata"]["version"] == version
    assert all(p["version"] == version for p in market["plugins"])


# --- the manifest rules (PLUG001-006): positive and negative fixtures ----------------------------

def test_real_pack_manifests_are_clean_and_all_present():
    root_plugin_manifests = {m.path for m in MANIFESTS if m.kind == "plugin"}
    for m in manifests_for(REPO):
        # the repository root is the source, not a plugin: its plugin manifests live in plugins/<name>/ only
        assert (REPO / m.path).is_file() == (m.path not in root_plugin_manifests), m.path
    assert check_plugin_manifests(REPO) == []
    assert check_plugin_drift(REPO) == []


def test_plugin_folder_drift_is_reported_and_package_fixes_it(clone, tmp_path):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    assert check_plugin_drift(pack) == []
    ref = pack / "references" / "kafka-streaming.md"
    ref.write_text(ref.read_text(encoding="utf-8") + "\nOne more sentence.\n", encoding="utf-8")
    (pack / PLUGIN / "package.json").write_text("{}\n")
    shutil.rmtree(pack / PLUGIN / ".cursor-plugin")
    found = sorted((f.path, f.code, f.message.split(":")[1].strip()) for f in check_plugin_drift(pack))
    assert found == [(f"{PLUGIN}/.cursor-plugin/plugin.json", "PLUG007", "missing"),
                     (f"{PLUGIN}/package.json", "PLUG007", "not generated (extra)"),
                     (f"{PLUGIN}/skills/{NAME}/references/kafka-streaming.md", "PLUG007", "out of date")]
    build_plugin(pack)
    assert check_plugin_drift(pack) == []
    shutil.rmtree(pack / "plugins")
    assert [(f.path, f.code) for f in check_plugin_drift(pack)] == [(PLUGIN, "PLUG007")]


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2) + "\n")


def _second_skill(p: Path) -> None:
    (p / PLUGIN / "skills" / "nested").mkdir()
    shutil.copy(p / "SKILL.md", p / PLUGIN / "skills" / "nested" / "SKILL.md")


MUTATIONS = {
    "PLUG001": lambda p: (p / PLUGIN / ".codex-plugin/plugin.json").write_text('{"name": "spark-rtm-lakebase",'),
    "PLUG002": lambda p: _edit_json(p / ".agents/plugins/marketplace.json",
                                    lambda d: d["plugins"][0]["policy"].update(installation="MAYBE")),
    "PLUG003": lambda p: _edit_json(p / PLUGIN / ".claude-plugin/plugin.json", lambda d: d.update(name="other-skill")),
    "PLUG004": lambda p: _edit_json(p / PLUGIN / ".cursor-plugin/plugin.json", lambda d: d.update(version="9.9.9")),
    "PLUG005": lambda p: _edit_json(p / PLUGIN / ".claude-plugin/plugin.json", lambda d: d.update(skills=["./nowhere"])),
    "PLUG006": _second_skill,
    # Codex 0.169 ignores a skills path equal to the plugin root; Cursor's validator refuses it.
    "PLUG008": lambda p: _edit_json(p / PLUGIN / ".codex-plugin/plugin.json", lambda d: d.update(skills="./")),
    # package.json in the plugin folder: Claude Code runs `npm ci` in the installed copy.
    "PLUG009": lambda p: (p / PLUGIN / "package.json").write_text("{}\n"),
    # The Codex skill card's text differs from the plugin card's (pyproject's short-description).
    "PLUG010": lambda p: (p / "agents/openai.yaml").write_text((p / "agents/openai.yaml").read_text().replace(
        'short_description: "', 'short_description: "Fast ', 1)),
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


@pytest.mark.parametrize("text", ["Short text", "A" * 65])
def test_codex_short_description_must_be_25_to_64_characters(clone, tmp_path, text):
    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    meta = pack / "agents" / "openai.yaml"
    current = yaml.safe_load(meta.read_text())["interface"]["short_description"]
    assert 25 <= len(current) <= 64
    meta.write_text(meta.read_text().replace(current, text))
    found = [(f.path, f.code, f.message) for f in check_plugin_manifests(pack)]
    assert [(p, c) for p, c, _ in found] == [("agents/openai.yaml", "PLUG002")]
    assert "interface/short_description" in found[0][2]


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
    assert f"{PLUGIN}/.cursor-plugin/plugin.json:" in proc.stdout and "PLUG004" in proc.stdout
    assert "PLUG007" in proc.stdout  # and the hand edit is drift from what package writes


# --- the README's and the site's install steps name what the manifests define --------------------

def _install_lines(rel: str) -> list[str]:
    doc = parse(rel, (REPO / rel).read_text(encoding="utf-8"))
    return [line.split("#")[0].strip() for b in doc.blocks for line in b.lines
            if line.strip().startswith(("/plugin ", "claude plugin", "codex plugin", "bash scripts/package.sh"))]


def test_readme_and_getting_started_give_the_commands_the_client_tests_run():
    claude_market = json.loads((REPO / ".claude-plugin/marketplace.json").read_text())["name"]
    codex_market = json.loads((REPO / ".agents/plugins/marketplace.json").read_text())["name"]
    expected = ["bash scripts/package.sh",
                "claude plugin marketplace add /path/to/clone", f"claude plugin install {NAME}@{claude_market}",
                "codex plugin marketplace add /path/to/clone", f"codex plugin add {NAME}@{codex_market}"]
    assert _install_lines("README.md") == expected
    assert _install_lines("docs/getting-started.md") == expected
    clients = (REPO / "tests" / "clients" / "test_clients.py").read_text()
    for fragment in ('"plugin", "marketplace", "add"', '"plugin", "install", f"{NAME}@{NAME}"',
                     '"plugin", "add", f"{NAME}@{NAME}"'):
        assert fragment in clients  # the same commands, run by the real clients
    for rel in ("README.md", "docs/getting-started.md"):
        text = (REPO / rel).read_text(encoding="utf-8")
        for skills_dir in ("~/.claude/skills/", "~/.agents/skills/", "~/.cursor/skills/"):
            assert f"cp -r dist/{NAME} {skills_dir}" in text, (rel, skills_dir)


# --- packaging needs no Java and no PySpark ------------------------------------------------------

def _path_without_java(tmp_path: Path) -> str:
    """A PATH holding every command of this one except java*, javac and the pack's own virtual environments."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        folder = Path(d)
        if not folder.is_dir() or "/.venv/" in f"{folder}/" or "/.cache/" in f"{folder}/":
            continue
        for exe in folder.iterdir():
            if exe.name.startswith(("java", "jar")) or (bin_dir / exe.name).exists():
                continue
            (bin_dir / exe.name).symlink_to(exe)
    return str(bin_dir)


def test_package_sh_builds_without_java_or_pyspark(clone, tmp_path):
    import os

    path = _path_without_java(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHON", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = path
    assert subprocess.run(["bash", "-c", "command -v java || command -v javac"], env=env).returncode != 0
    out = tmp_path / "out"
    proc = subprocess.run(["bash", str(clone / "scripts" / "package.sh"), "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / NAME / "SKILL.md").is_file() and (out / f"{NAME}.zip").is_file()
    assert check_plugin_drift(clone) == []
    # the plugin it builds is the committed one, byte for byte
    def tree(folder: Path) -> dict[str, bytes]:
        return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    assert tree(out / "plugins" / NAME) == tree(clone / PLUGIN)
    venv_py = clone / ".cache" / "package-venv" / "bin" / "python"
    probe = subprocess.run([str(venv_py), "-c", "import pyspark"], capture_output=True, text=True, env=env)
    assert probe.returncode != 0 and "pyspark" in probe.stderr  # the packaging environment holds no Spark
    assert not (clone / ".venv").exists() and not (clone / "node_modules").exists()


def test_readme_names_the_client_versions_the_install_script_pins():
    import re

    script = (REPO / "scripts" / "install_clients.sh").read_text()
    claude = re.search(r'^CLAUDE_CODE_VERSION="([^"]+)"', script, re.M).group(1)
    codex = re.search(r'^CODEX_VERSION="([^"]+)"', script, re.M).group(1)
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"Claude Code {claude}" in text and f"Codex CLI {codex}" in text
    assert "skills-ref 0.1.1" in text and '"skills-ref==0.1.1"' in (REPO / "pyproject.toml").read_text()
    site = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert f"Claude Code\n{claude}" in site or f"Claude Code {claude}" in site


def test_markdown_checks_skip_the_built_and_generated_copies(clone, tmp_path):
    """dist/ (built, gitignored) and plugins/ (generated, drift-checked whole) are copies, not sources."""
    from skillcheck.packfiles import markdown_files

    pack = Path(shutil.copytree(clone, tmp_path / "pack"))
    (pack / "dist" / NAME / "references").mkdir(parents=True)
    (pack / "dist" / NAME / "references" / "stale.md").write_text("# Stale\n\n[gone](nowhere.md)\n")
    files = markdown_files(pack)
    assert not [f for f in files if f.startswith(("dist/", "plugins/"))]
    assert "references/kafka-streaming.md" in files


def test_package_without_plugin_metadata_builds_the_skill_and_says_so(tmp_path):
    from tests.validator.packbuilder import make_pack

    pack = make_pack(tmp_path / "mini")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "skills.py"), "package", "--root", str(pack)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no [tool.skill.plugin]" in proc.stdout
    assert (pack / "dist" / "mini-skill" / "SKILL.md").is_file() and not (pack / "plugins").exists()
