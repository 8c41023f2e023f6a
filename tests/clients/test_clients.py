"""The real clients load the skill: Claude Code and Codex CLI from npm, skills-ref's validator from PyPI.

Marker ``clients`` (its own CI group: ``bash scripts/test.sh -m clients``). The clients are installed by
``scripts/install_clients.sh`` into ``.cache/clients/pinned/`` (pinned versions, cached by stamp);
``CLIENTS_LATEST=1`` runs the same tests against the newest versions (``.cache/clients/latest/``).
Every test runs offline in a throwaway ``HOME`` with no login: Claude Code gets a dummy API key and a
base URL nobody listens on, and prints its start-up ``init`` event (which lists the loaded skills)
before its first request fails; Codex answers its app-server's ``skills/list`` and ``plugin/read``
without a model. Each route a user takes is driven with the client's own commands:

- Claude Code plugin: ``claude plugin marketplace add <clone>``, ``claude plugin install``;
- Claude Code personal skill: the packaged folder in ``~/.claude/skills/``;
- Codex plugin: ``codex plugin marketplace add <clone>``, ``codex plugin add``;
- Codex personal skill: the packaged folder in ``~/.agents/skills/``;
- ``agentskills validate`` (skills-ref) on the installed skill folder.

Tests pin the client behaviour the validator's PLUG rules rest on (Codex ignores a skills path at the
plugin root: PLUG008; Codex's skill-creator asks for a 25-64 character short_description), so a client
that changes turns a test red. A test skips only when a client's binary is absent after the install
(a platform without it), naming which.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from skillcheck.package import build_package

pytestmark = pytest.mark.clients

NAME = "spark-rtm-lakebase"
PLUGIN_SKILL = f"{NAME}:{NAME}"  # how both clients name a plugin's skill: <plugin>:<skill>
_CLONE_IGNORE = shutil.ignore_patterns(".git", ".venv", ".cache", "node_modules", "site", "dist", "__pycache__",
                                       "*.egg-info", "test-artifacts", ".pytest_cache", ".hypothesis")


# --- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def clients() -> Path:
    """The prefix holding the installed clients (installs them on first use)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not on PATH: Claude Code and Codex (npm packages) cannot be installed here")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "install_clients.sh")], capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def _binary(clients: Path, rel: str) -> str:
    exe = clients / rel
    if not exe.is_file():
        pytest.skip(f"{exe} is absent after scripts/install_clients.sh (no build of this client for "
                    f"{sys.platform}/{os.uname().machine})")
    return str(exe)


@pytest.fixture(scope="session")
def clone(tmp_path_factory) -> Path:
    """A clone of the repository as a user has it (no git metadata, no local build state)."""
    return Path(shutil.copytree(REPO, tmp_path_factory.mktemp("clone") / "pack", ignore=_CLONE_IGNORE))


@pytest.fixture(scope="session")
def packaged(tmp_path_factory) -> Path:
    folder, _zip = build_package(REPO, tmp_path_factory.mktemp("dist"))
    return folder


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CLAUDE", "CODEX_", "OPENAI_"))}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"),
               # offline: a dummy key and an address nobody listens on, so no request leaves the machine
               ANTHROPIC_API_KEY="sk-ant-dummy-offline", ANTHROPIC_BASE_URL="http://127.0.0.1:9",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1", RUST_LOG="warn",
               NO_COLOR="1")
    return env


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    return proc


# --- Claude Code ---------------------------------------------------------------------------------

def claude_init(claude: str, env: dict[str, str], cwd: Path, timeout: float = 60) -> dict:
    """The ``init`` event of ``claude -p --output-format stream-json --verbose`` (printed before any request)."""
    proc = subprocess.Popen([claude, "-p", "--output-format", "stream-json", "--verbose", "Say hello."],
                            env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if not ready:
                continue
            line = proc.stdout.readline()
            if not line:
                break
            event = json.loads(line)
            if event.get("type") == "system" and event.get("subtype") == "init":
                return event
        raise AssertionError(f"no init event from claude within {timeout} s; stderr: {proc.stderr.read()[-2000:]}"
                             if proc.poll() is not None else f"no init event from claude within {timeout} s")
    finally:
        proc.kill()
        proc.wait(timeout=30)


def test_claude_code_plugin_route(clients, clone, tmp_path):
    claude = _binary(clients, "node_modules/.bin/claude")
    env = _env(tmp_path / "home")
    _run([claude, "plugin", "marketplace", "add", str(clone)], env, tmp_path)
    _run([claude, "plugin", "install", f"{NAME}@{NAME}"], env, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    init = claude_init(claude, env, work)
    assert PLUGIN_SKILL in init["skills"], init["skills"]
    (plugin,) = [p for p in init["plugins"] if p["name"] == NAME]
    assert plugin["source"] == f"{NAME}@{NAME}"
    # what Claude copied into its cache: the manifests and the skill, nothing it would read as something else
    installed = json.loads((tmp_path / "home/.claude/plugins/installed_plugins.json").read_text())
    (entry,) = installed["plugins"][f"{NAME}@{NAME}"]
    cache = Path(entry["installPath"])
    assert sorted(p.name for p in cache.iterdir()) == [".claude-plugin", ".codex-plugin", ".cursor-plugin", "skills"]
    assert (cache / "skills" / NAME / "SKILL.md").is_file()
    assert not list(cache.rglob("package.json")) and not (cache / "node_modules").exists()
    assert _user_package(cache / "skills" / NAME) == _user_package(REPO)


def _user_package(folder: Path) -> set[str]:
    """The user's package as shipped: every .py, .java and .json under rtm_lakebase/ (checker and JVM source included)."""
    return {p.relative_to(folder).as_posix() for p in (folder / "rtm_lakebase").rglob("*")
            if p.suffix in (".py", ".java", ".json") and "__pycache__" not in p.parts and "build" not in p.parts}


def test_claude_code_validator_passes_the_plugin_and_the_marketplace(clients, clone, tmp_path):
    """Claude's own checker (manifests only: the init tests above prove the skill loads)."""
    claude = _binary(clients, "node_modules/.bin/claude")
    env = _env(tmp_path / "home")
    plugin = _run([claude, "plugin", "validate", "--strict", str(clone / "plugins" / NAME)], env, tmp_path)
    assert f"skills: {PLUGIN_SKILL}" in plugin.stdout and "Validation passed" in plugin.stdout, plugin.stdout
    market = _run([claude, "plugin", "validate", "--strict", str(clone)], env, tmp_path)
    assert "marketplace.json" in market.stdout and "Validation passed" in market.stdout, market.stdout


def test_claude_code_personal_route(clients, packaged, tmp_path):
    claude = _binary(clients, "node_modules/.bin/claude")
    env = _env(tmp_path / "home")
    shutil.copytree(packaged, tmp_path / "home" / ".claude" / "skills" / NAME)
    work = tmp_path / "work"
    work.mkdir()
    init = claude_init(claude, env, work)
    assert NAME in init["skills"], init["skills"]


def test_claude_code_init_lists_no_skill_of_a_broken_copy(clients, packaged, tmp_path):
    """The init check can fail: a SKILL.md without front matter is not listed."""
    claude = _binary(clients, "node_modules/.bin/claude")
    env = _env(tmp_path / "home")
    skill = Path(shutil.copytree(packaged, tmp_path / "home" / ".claude" / "skills" / NAME))
    text = (skill / "SKILL.md").read_text(encoding="utf-8")
    (skill / "SKILL.md").write_text(text.split("---\n", 2)[2], encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    init = claude_init(claude, env, work)
    assert NAME not in init["skills"], init["skills"]


# --- Codex ---------------------------------------------------------------------------------------

class AppServer:
    """``codex app-server`` over stdio (JSON-RPC lines): initialize, then requests answered without a model."""

    def __init__(self, codex: str, env: dict[str, str], cwd: Path, log: Path):
        self._log = log.open("w")
        self.proc = subprocess.Popen([codex, "app-server"], env=env, cwd=cwd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True)
        self._next = 0
        self.request("initialize", {"clientInfo": {"name": "pack-tests", "version": "0"}})
        self._send({"method": "initialized"})

    def _send(self, message: dict) -> None:
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict, timeout: float = 60) -> dict:
        self._next += 1
        self._send({"id": self._next, "method": method, "params": params})
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"codex app-server exited ({self.proc.poll()}) before answering {method}")
            message = json.loads(line)
            if message.get("id") == self._next:
                assert "error" not in message, message["error"]
                return message["result"]
        raise AssertionError(f"codex app-server did not answer {method} within {timeout} s")

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        self._log.close()


@pytest.fixture
def codex(clients):
    return _binary(clients, "node_modules/.bin/codex")


def _codex_skills(codex: str, env: dict[str, str], work: Path, log: Path, plugin_market: Path | None = None):
    server = AppServer(codex, env, work, log)
    try:
        listed = server.request("skills/list", {"cwds": [str(work)], "forceReload": True})
        (entry,) = listed["data"]
        plugin = None
        if plugin_market is not None:
            plugin = server.request("plugin/read", {"pluginName": NAME, "marketplacePath": str(plugin_market)})
        return entry, plugin
    finally:
        server.close()


def _openai_yaml() -> dict:
    return yaml.safe_load((REPO / "agents" / "openai.yaml").read_text(encoding="utf-8"))["interface"]


def _assert_codex_metadata(skill: dict) -> None:
    meta = _openai_yaml()
    assert skill["interface"]["displayName"] == meta["display_name"]
    assert skill["interface"]["shortDescription"] == meta["short_description"]
    assert skill["interface"]["defaultPrompt"] == meta["default_prompt"]
    assert skill["enabled"] is True


def test_codex_plugin_route(codex, clone, tmp_path):
    env = _env(tmp_path / "home")
    _run([codex, "plugin", "marketplace", "add", str(clone)], env, tmp_path)
    _run([codex, "plugin", "add", f"{NAME}@{NAME}"], env, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "app-server.log"
    entry, plugin = _codex_skills(codex, env, work, log, clone / ".agents/plugins/marketplace.json")
    assert entry["errors"] == []
    (skill,) = [s for s in entry["skills"] if s["name"] == PLUGIN_SKILL]
    assert skill["pluginId"] == f"{NAME}@{NAME}"
    assert Path(skill["path"]).parts[-3:] == ("skills", NAME, "SKILL.md")
    assert _user_package(Path(skill["path"]).parent) == _user_package(REPO)
    _assert_codex_metadata(skill)
    summary = plugin["plugin"]["summary"]
    assert summary["installed"] and summary["enabled"]
    assert [s["name"] for s in plugin["plugin"]["skills"]] == [PLUGIN_SKILL]
    assert "ignoring skills" not in log.read_text()


def test_codex_personal_route(codex, packaged, tmp_path):
    env = _env(tmp_path / "home")
    shutil.copytree(packaged, tmp_path / "home" / ".agents" / "skills" / NAME)
    work = tmp_path / "work"
    work.mkdir()
    entry, _ = _codex_skills(codex, env, work, tmp_path / "app-server.log")
    (skill,) = [s for s in entry["skills"] if s["name"] == NAME]
    assert skill["scope"] == "user" and skill["pluginId"] is None
    _assert_codex_metadata(skill)


def test_codex_ignores_a_skills_path_at_the_plugin_root(codex, clone, tmp_path):
    """What PLUG008 rests on: with ``"skills": "./"`` Codex installs the plugin and loads no skill."""
    market = Path(shutil.copytree(clone, tmp_path / "market",
                                  ignore=lambda d, names: {"plugins"} if Path(d) == clone else set()))
    plugin = market / "plugins" / NAME
    shutil.copytree(clone / "plugins" / NAME / "skills" / NAME, plugin)
    shutil.copytree(clone / "plugins" / NAME / ".codex-plugin", plugin / ".codex-plugin")
    manifest = json.loads((plugin / ".codex-plugin/plugin.json").read_text())
    (plugin / ".codex-plugin/plugin.json").write_text(json.dumps({**manifest, "skills": "./"}, indent=2))
    env = _env(tmp_path / "home")
    _run([codex, "plugin", "marketplace", "add", str(market)], env, tmp_path)
    _run([codex, "plugin", "add", f"{NAME}@{NAME}"], env, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "app-server.log"
    entry, read = _codex_skills(codex, env, work, log, market / ".agents/plugins/marketplace.json")
    assert read["plugin"]["summary"]["installed"]
    assert read["plugin"]["skills"] == [] and not [s for s in entry["skills"] if NAME in s["name"]]
    assert "ignoring skills: path must not be `./`" in log.read_text()


def test_codex_skill_creator_asks_for_a_25_to_64_character_short_description(codex, tmp_path):
    """The openai.yaml length rule (schemas/codex-skill-metadata.schema.json) is Codex's own guidance."""
    env = _env(tmp_path / "home")
    work = tmp_path / "work"
    work.mkdir()
    _codex_skills(codex, env, work, tmp_path / "app-server.log")  # Codex unpacks its system skills on start
    guide = tmp_path / "home/.codex/skills/.system/skill-creator/references/openai_yaml.md"
    text = guide.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if "interface.short_description" in line)
    assert "25–64 chars" in line, line
    assert 25 <= len(_openai_yaml()["short_description"]) <= 64


# --- skills-ref ----------------------------------------------------------------------------------

def test_agentskills_validate_accepts_the_installed_folder_and_refuses_a_broken_one(clients, packaged, tmp_path):
    agentskills = _binary(clients, "venv/bin/agentskills")
    installed = Path(shutil.copytree(packaged, tmp_path / "skills" / NAME))
    ok = subprocess.run([agentskills, "validate", str(installed)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = Path(shutil.copytree(packaged, tmp_path / "other" / "not-the-name"))
    bad = subprocess.run([agentskills, "validate", str(broken)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "not-the-name" in bad.stdout + bad.stderr
