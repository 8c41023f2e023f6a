"""Read one file safely: regular files inside the folder checked only, size-limited.

A FIFO would block ``open()`` forever, a device can stream without end and a
symlink can leave the folder, so the file's type is checked with ``stat``
before it is opened (non-blocking) and again on the open descriptor; at most
``MAX_FILE_BYTES + 1`` bytes are read. Problems are findings (PACK002,
PACK003, PACK004), never exceptions.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rtm_lakebase.check.findings import Finding
from rtm_lakebase.check.limits import MAX_FILE_BYTES


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
