"""Read one pack file safely: regular files inside the pack only, size-limited, UTF-8.

A FIFO would block ``open()`` forever, a device can stream without end and a
symlink can leave the pack, so the file's type is checked with ``stat`` before
it is opened (non-blocking) and again on the open descriptor; at most
``MAX_FILE_BYTES + 1`` bytes are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# Reading one file safely is shared with the checker that ships with the skill: defined there, once.
from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.reading import file_problem, nesting_depth, read_pack_bytes

__all__ = ["file_problem", "load_json", "nesting_depth", "read_bytes_checked", "read_pack_bytes", "read_pack_text",
           "read_text_checked", "safe_exists", "write_atomically"]


def read_pack_text(root: Path, rel: str) -> tuple[str | None, Finding | None]:
    data, problem = read_pack_bytes(root, rel)
    if problem:
        return None, problem
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return None, Finding(rel, line, 1, "PACK002", f"not valid UTF-8 (byte {exc.start}): {exc.reason}")


def load_json(root: Path, rel: str, code: str) -> tuple[object, bytes | None, Finding | None]:
    """(value, raw bytes, problem): read with :func:`read_pack_bytes`, parse, refuse nesting past MAX_NESTING as ``code``."""
    import json

    from .limits import MAX_NESTING

    raw, problem = read_pack_bytes(root, rel)
    if problem:
        return None, None, problem
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, raw, Finding(rel, 1, 1, code, f"not UTF-8: {exc.reason}")
    except json.JSONDecodeError as exc:
        return None, raw, Finding(rel, exc.lineno, exc.colno, code, f"invalid JSON: {exc.msg}")
    except (RecursionError, MemoryError, ValueError) as exc:
        return None, raw, Finding(rel, 1, 1, code, f"JSON nested too deeply to read ({type(exc).__name__})")
    if nesting_depth(value, MAX_NESTING) > MAX_NESTING:
        return None, raw, Finding(rel, 1, 1, code, f"JSON nested deeper than {MAX_NESTING} levels")
    return value, raw, None


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (a new regular file; never written through a symlink or into a FIFO)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode) if path.is_file() else 0o644)
        except OSError:
            pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_text_checked(root: Path, rel: str) -> str:
    """:func:`read_pack_text` for code that handles ``OSError``: a problem is raised as ``OSError`` (never a hang)."""
    text, problem = read_pack_text(root, rel)
    if problem:
        if problem.message.startswith("not a regular file: missing"):
            raise FileNotFoundError(2, "No such file or directory", str(root / rel))
        raise OSError(f"{problem.code} {problem.message}")
    return text


def read_bytes_checked(root: Path, rel: str) -> bytes:
    data, problem = read_pack_bytes(root, rel)
    if problem:
        raise OSError(f"{problem.code} {problem.message}")
    return data


def safe_exists(path: Path, kind: str = "any") -> bool:
    """``path.exists()`` (``kind="file"``: ``is_file()``) that is False, not an error, for names no file system takes."""
    try:
        return path.is_file() if kind == "file" else path.exists()
    except (OSError, ValueError):
        return False
