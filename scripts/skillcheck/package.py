"""`skills.py package`: build the folder an assistant installs, ``dist/<install-name>/``, and its zip.

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

import os
import posixpath
import shutil
import tempfile
import tomllib
import zipfile
from pathlib import Path

from rtm_lakebase.check.findings import Finding

from .links import SCHEME_RE, check_links
from .markdown import parse
from .readfile import read_bytes_checked, read_text_checked, safe_exists

#: What the installed skill holds: single files and folders (with the suffixes kept from each).
INSTALL_FILES = ("SKILL.md", "agents/openai.yaml")
INSTALL_DIRS = (("references", (".md",)), ("rtm_lakebase", (".py", ".java")), ("examples", (".py",)))
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
    return sorted(out)


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
