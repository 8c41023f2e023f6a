"""`skills.py package`: build the folder an assistant installs, ``dist/<install-name>/``, its zip, and the plugin.

The plugin folder ``plugins/<install-name>/`` (committed, so a clone's
marketplaces can name it) holds only the skill: each client's plugin manifest
(``.claude-plugin/``, ``.codex-plugin/``, ``.cursor-plugin/plugin.json``,
written from ``[tool.skill.plugin]`` in pyproject.toml) and
``skills/<install-name>/``, the same tree as ``dist/<install-name>/``. No
package.json, tests or root ``agents/`` a client would read as something else.
``validate`` reports a plugin folder that differs from what ``package`` would
write (PLUG007), the way it reports a stale manifest.json (MAN004).

The installed skill holds SKILL.md, ``references/``, the Codex metadata
``agents/openai.yaml``, and the code the references show and link: the user's
package ``rtm_lakebase/`` and the runnable ``examples/``. Nothing else (no lab,
tests, tools or benchmarks).

Markdown in the package keeps its relative links when they point inside the
package. A link to a repository file the package does not hold (the lab, a
benchmark script) is rewritten to that file's page in the repository
(``[project.urls] Repository`` in pyproject.toml, ``/blob/main/<path>``), so
every relative link left in the installed folder resolves inside it;
:func:`check_package` proves that on the built folder (PKG001).

The build goes to a temporary folder next to the target and is renamed into
place only when complete, so a failed build leaves the previous one (or
nothing) behind. The zip holds the folder under its install name, with fixed
timestamps, so the same sources give the same bytes.
"""

from __future__ import annotations

import filecmp
import json
import os
import posixpath
import shutil
import subprocess
import tempfile
import tomllib
import zipfile
from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .links import SCHEME_RE, check_links
from .markdown import parse
from .readfile import read_bytes_checked, read_text_checked, safe_exists

#: What the installed skill holds: single files and folders (with the suffixes kept from each). In a git
#: checkout only files git tracks count, so a stray scratch file in rtm_lakebase/ never ships.
INSTALL_FILES = ("SKILL.md", "LICENSE", "agents/openai.yaml")
INSTALL_DIRS = (("references", (".md",)), ("rtm_lakebase", (".py", ".java", ".json")), ("examples", (".py",)))
_ZIP_TIME = (2026, 1, 1, 0, 0, 0)


class PackageError(Exception):
    """The package cannot be built; the message names the cause, ``path`` the file at fault."""

    def __init__(self, message: str, path: str = "pyproject.toml"):
        super().__init__(message)
        self.path = path


def read_settings(root: Path) -> tuple[str, str, str | None]:
    """(install-name, version, repository URL or None) from pyproject.toml."""
    try:
        data = tomllib.loads(read_text_checked(root, "pyproject.toml"))
    except FileNotFoundError:
        raise PackageError("pyproject.toml not found at the pack root") from None
    except (OSError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError) as exc:
        raise PackageError(f"pyproject.toml unreadable: {exc}") from None
    name = data.get("tool", {}).get("skill", {}).get("install-name")
    if not isinstance(name, str) or not name:
        raise PackageError("pyproject.toml has no [tool.skill] install-name")
    version = str(data.get("project", {}).get("version", "0.0.0"))
    repo = data.get("project", {}).get("urls", {}).get("Repository")
    return name, version, repo.rstrip("/") if isinstance(repo, str) and repo else None


def tracked_files(root: Path) -> set[str] | None:
    """Root-relative paths git tracks (index included) under the install folders; None outside a git checkout.

    A copy of the pack that git does not track (an unpacked archive, a test's copy) packages every file.
    """
    try:
        proc = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--", *INSTALL_FILES,
                               *(folder for folder, _ in INSTALL_DIRS)], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    files = {p for p in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if p}
    return files if proc.returncode == 0 and "SKILL.md" in files else None


def install_files(root: Path) -> list[str]:
    """Root-relative paths of every file the installed skill holds, sorted."""
    out = [rel for rel in INSTALL_FILES if os.path.lexists(root / rel)]
    for folder, suffixes in INSTALL_DIRS:
        base = root / folder
        if not base.is_dir():
            continue
        for p in base.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if (not p.is_dir() or p.is_symlink()) and p.suffix in suffixes and "__pycache__" not in rel.split("/"):
                out.append(rel)
    tracked = tracked_files(root)
    return sorted(rel for rel in out if tracked is None or rel in tracked)


def _leaving_targets(rel: str, text: str, members: set[str], root: Path) -> list[tuple[str, str]]:
    """(link target as written, root-relative file) for each relative link to a pack file the package lacks.

    A target that exists nowhere is left alone: the link check reports it in the pack (LINK001).
    """
    out = []
    for link in parse(rel, text).links:
        target = link.target.strip()
        if not target or SCHEME_RE.match(target) or target.startswith(("#", "//", "/")):
            continue
        path_part = target.partition("#")[0].split("?")[0]
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path_part))
        inside = resolved in members or any(m.startswith(resolved + "/") for m in members)
        if not inside and not resolved.startswith("..") and safe_exists(root / resolved):
            out.append((target, resolved))
    return out


def rewrite_links(rel: str, text: str, members: set[str], repo_url: str | None, root: Path) -> str:
    """``text`` with every relative link to a file outside the package pointed at the repository."""
    for target, resolved in _leaving_targets(rel, text, members, root):
        if repo_url is None:
            raise PackageError(f"{rel} links {target!r}, which the package does not hold; set "
                               "[project.urls] Repository in pyproject.toml so it can point there", rel)
        anchor = target.partition("#")[2]
        url = f"{repo_url}/blob/main/{resolved}" + (f"#{anchor}" if anchor else "")
        text = text.replace(f"]({target})", f"]({url})").replace(f"]({target} ", f"]({url} ")
    return text


def _write_tree(root: Path, dest: Path, repo_url: str | None) -> list[str]:
    files = install_files(root)
    if "SKILL.md" not in files:
        raise PackageError("SKILL.md not found at the pack root", "SKILL.md")
    members = set(files)
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel.endswith(".md"):
            try:
                text = read_text_checked(root, rel)
            except (OSError, UnicodeDecodeError) as exc:
                raise PackageError(f"{rel}: cannot read: {exc}", rel) from None
            target.write_text(rewrite_links(rel, text, members, repo_url, root), encoding="utf-8")
        else:
            try:
                target.write_bytes(read_bytes_checked(root, rel))
            except OSError as exc:
                raise PackageError(f"{rel}: cannot read: {exc}", rel) from None
    return files


def _write_zip(folder: Path, name: str, zip_path: Path) -> None:
    tmp = zip_path.with_name(zip_path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                info = zipfile.ZipInfo(f"{name}/{p.relative_to(folder).as_posix()}", date_time=_ZIP_TIME)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, p.read_bytes())
    os.replace(tmp, zip_path)


def build_package(root: Path, out_dir: Path) -> tuple[Path, Path]:
    """Build ``out_dir/<install-name>/`` and ``out_dir/<install-name>.zip``; returns both paths."""
    name, _version, repo_url = read_settings(root)
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    try:
        _write_tree(root, staging, repo_url)
        problems = check_package(staging)
        if problems:
            raise PackageError("; ".join(f.text() for f in problems), problems[0].path)
        folder, zip_path = out_dir / name, out_dir / f"{name}.zip"
        _write_zip(staging, name, zip_path)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(staging, folder)
        return folder, zip_path
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def check_package(folder: Path) -> list[Finding]:
    """PKG001 for every relative link (or #anchor) in the package's Markdown that does not resolve inside it."""
    out: list[Finding] = []
    docs: dict[str, object] = {}

    def load(rel: str):
        if rel not in docs:
            try:
                docs[rel] = parse(rel, (folder / rel).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                docs[rel] = None
        return docs[rel]

    for p in sorted(folder.rglob("*.md")):
        rel = p.relative_to(folder).as_posix()
        doc = load(rel)
        if doc is None:
            continue
        for f in check_links(doc, folder, load):
            out.append(Finding(rel, f.line, f.col, "PKG001", f"in the installed skill: {f.message}"))
    return out


def check_pack_package(root: Path) -> list[Finding]:
    """Build the package in a temporary folder and report what would break once installed."""
    try:
        name, _version, repo_url = read_settings(root)
    except PackageError:
        return []  # reported by the front-matter checks (FM004)
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / name
        try:
            _write_tree(root, dest, repo_url)
        except PackageError as exc:
            if exc.path == "SKILL.md":
                return []  # PACK001
            return [Finding(exc.path, 1, 1, "PKG002", str(exc))]
        found = check_package(dest)
    # A link already broken in the pack is reported there (LINK001/LINK002), not twice.
    source_broken = set()
    for rel in {f.path for f in found}:
        try:
            doc = parse(rel, read_text_checked(root, rel))
        except (OSError, UnicodeDecodeError):
            continue
        source_broken |= {(f.path, f.line, f.message) for f in check_links(doc, root, lambda r: _load_doc(root, r))}
    prefix = "in the installed skill: "
    return [f for f in found if (f.path, f.line, f.message[len(prefix):]) not in source_broken]


def _load_doc(root: Path, rel: str):
    try:
        return parse(rel, read_text_checked(root, rel))
    except (OSError, UnicodeDecodeError):
        return None


# --- the plugin folder: plugins/<install-name>/ ---------------------------------------------------

PLUGINS_DIR = "plugins"
#: Where each client looks for the skills inside a plugin. Codex ignores a skills path equal to the
#: plugin root (``ignoring skills: path must not be './'``), and Cursor's validator refuses it.
PLUGIN_SKILLS = "./skills/"


def plugin_settings(root: Path) -> dict:
    """``[tool.skill.plugin]`` (display-name, description, short-description, author, license, category,
    keywords) with the project's name, version and URLs."""
    name, version, repo_url = read_settings(root)
    data = tomllib.loads(read_text_checked(root, "pyproject.toml"))
    meta = data.get("tool", {}).get("skill", {}).get("plugin")
    if not isinstance(meta, dict):
        raise PackageError("pyproject.toml has no [tool.skill.plugin] table (the plugin manifests' metadata)")
    need = ("display-name", "description", "short-description", "author", "license", "category", "keywords")
    missing = [k for k in need if not meta.get(k)]
    if missing:
        raise PackageError(f"[tool.skill.plugin] in pyproject.toml lacks {', '.join(missing)}")
    urls = data.get("project", {}).get("urls", {})
    return {**meta, "name": name, "version": version, "repository": repo_url,
            "homepage": urls.get("Documentation") or repo_url}


def has_plugin_settings(root: Path) -> bool:
    """Whether pyproject.toml has a ``[tool.skill.plugin]`` table (a bare skill needs no plugin folder)."""
    try:
        data = tomllib.loads(read_text_checked(root, "pyproject.toml"))
    except (OSError, UnicodeDecodeError, RecursionError, tomllib.TOMLDecodeError):
        return False
    return isinstance(data.get("tool", {}).get("skill", {}).get("plugin"), dict)


def plugin_manifests(root: Path) -> dict[str, bytes]:
    """Plugin-relative path -> bytes of each client's plugin manifest."""
    s = plugin_settings(root)
    common = {"name": s["name"], "version": s["version"], "description": s["description"],
              "author": {"name": s["author"]}}
    links = {k: s[k] for k in ("homepage", "repository") if s.get(k)}
    tail = {"license": s["license"], "keywords": list(s["keywords"])}
    manifests = {
        # Claude Code loads skills/ of a plugin by default; naming it again would add nothing.
        ".claude-plugin/plugin.json": {**common, **links, **tail},
        ".codex-plugin/plugin.json": {**common, **links, **tail, "skills": PLUGIN_SKILLS,
                                      "interface": {"displayName": s["display-name"],
                                                    "shortDescription": s["short-description"],
                                                    "category": s["category"], "developerName": s["author"]}},
        ".cursor-plugin/plugin.json": {"name": s["name"], "displayName": s["display-name"],
                                       **{k: v for k, v in common.items() if k != "name"}, **links, **tail,
                                       "skills": PLUGIN_SKILLS},
    }
    return {rel: (json.dumps(m, indent=2, ensure_ascii=False) + "\n").encode("utf-8") for rel, m in manifests.items()}


def write_plugin_tree(root: Path, dest: Path) -> list[str]:
    """Write the plugin folder's content into ``dest``; returns its files (plugin-relative, sorted)."""
    name, _version, repo_url = read_settings(root)
    manifests = plugin_manifests(root)
    files = [f"skills/{name}/{rel}" for rel in _write_tree(root, dest / "skills" / name, repo_url)]
    for rel, data in manifests.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    return sorted(files + list(manifests))


def build_plugin(root: Path, out_dir: Path | None = None) -> Path:
    """Build ``plugins/<install-name>/`` (or ``out_dir/<install-name>/``) in place of the old one; returns it."""
    name, _version, _repo = read_settings(root)
    out_dir = out_dir or root / PLUGINS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
    try:
        write_plugin_tree(root, staging)
        problems = check_package(staging / "skills" / name)
        if problems:
            raise PackageError("; ".join(f.text() for f in problems), problems[0].path)
        folder = out_dir / name
        old = out_dir / f".{name}.old"
        if folder.exists():
            os.replace(folder, old)
        os.replace(staging, folder)
        if old.exists():
            shutil.rmtree(old)
        return folder
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _tree_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def check_plugin_drift(root: Path) -> list[Finding]:
    """PLUG007 when ``plugins/<install-name>/`` is missing or differs from what ``package`` would write.

    Checked when the pack has a plugin folder or a marketplace (a bare skill needs neither).
    """
    try:
        name, _version, _repo = read_settings(root)
    except PackageError:
        return []  # FM004
    rel = f"{PLUGINS_DIR}/{name}"
    markets = (".claude-plugin/marketplace.json", ".agents/plugins/marketplace.json", ".cursor-plugin/marketplace.json")
    if not os.path.lexists(root / rel) and not any(safe_exists(root / m) for m in markets):
        return []
    fix = "run `python scripts/skills.py package` and commit"
    with tempfile.TemporaryDirectory() as tmp:
        want = Path(tmp) / name
        try:
            write_plugin_tree(root, want)
        except PackageError as exc:
            if exc.path == "SKILL.md":
                return []  # PACK001
            return [Finding(exc.path, 1, 1, "PLUG007", f"the plugin folder {rel}/ cannot be generated: {exc}")]
        have = root / rel
        if not have.is_dir() or have.is_symlink():
            return [Finding(rel, 1, 1, "PLUG007", f"the plugin folder {rel}/ is missing; {fix}")]
        want_files, have_files = _tree_files(want), _tree_files(have)
        stale = sorted(f for f in want_files & have_files
                       if (have / f).is_symlink() or not filecmp.cmp(want / f, have / f, shallow=False))
        out = []
        for label, group in (("missing", sorted(want_files - have_files)), ("not generated (extra)",
                                                                          sorted(have_files - want_files)),
                             ("out of date", stale)):
            if group:
                more = f" and {len(group) - 3} more" if len(group) > 3 else ""
                out.append(Finding(f"{rel}/{group[0]}", 1, 1, "PLUG007",
                                   f"plugin folder drift: {label}: {', '.join(group[:3])}{more}; {fix}"))
        return out
