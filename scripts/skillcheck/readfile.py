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

from .findings import Finding
from .limits import MAX_FILE_BYTES


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def file_problem(root: Path, rel: str) -> Finding | None:
    """Why ``rel`` must not be opened (PACK003/PACK004), or None for a regular file inside the pack within the limit."""
    path = root / rel
    if "\0" in rel:
        return Finding(rel.replace("\0", "\\0"), 1, 1, "PACK002", "file name contains a NUL byte")
    try:
        st = path.stat()
    except FileNotFoundError:
        what = "a broken symlink" if path.is_symlink() else "missing"
        return Finding(rel, 1, 1, "PACK003", f"not a regular file: {what}")
    except OSError as exc:
        return Finding(rel, 1, 1, "PACK002", f"cannot read file: {exc.strerror or exc}")
    if not stat.S_ISREG(st.st_mode):
        via = " (through a symlink)" if path.is_symlink() else ""
        return Finding(rel, 1, 1, "PACK003", f"not a regular file: {_kind(st.st_mode)}{via}; never opened")
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return Finding(rel, 1, 1, "PACK003", "symlink points outside the pack; never opened")
    if st.st_size > MAX_FILE_BYTES:
        return Finding(rel, 1, 1, "PACK004", f"file is {st.st_size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit; not scanned")
    return None


def read_pack_bytes(root: Path, rel: str) -> tuple[bytes | None, Finding | None]:
    problem = file_problem(root, rel)
    if problem:
        return None, problem
    try:
        fd = os.open(root / rel, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        return None, Finding(rel, 1, 1, "PACK002", f"cannot read file: {exc.strerror or exc}")
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped between stat() and open()
            return None, Finding(rel, 1, 1, "PACK003", "not a regular file; never read")
        chunks, size = [], 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_FILE_BYTES + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return None, Finding(rel, 1, 1, "PACK002", f"cannot read file: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        return None, Finding(rel, 1, 1, "PACK004", f"file grew past the {MAX_FILE_BYTES:,}-byte limit; not scanned")
    return b"".join(chunks), None


def read_pack_text(root: Path, rel: str) -> tuple[str | None, Finding | None]:
    data, problem = read_pack_bytes(root, rel)
    if problem:
        return None, problem
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return None, Finding(rel, line, 1, "PACK002", f"not valid UTF-8 (byte {exc.start}): {exc.reason}")


def nesting_depth(value: object, limit: int) -> int:
    """Depth of nested lists/dicts in ``value`` (iterative; stops counting past ``limit``)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


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
