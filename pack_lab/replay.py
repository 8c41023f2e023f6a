"""Make a streaming query replay a batch it already ran, as after a crash before its commit.

Structured Streaming commits a batch in two files: ``offsets/<n>`` (what the
batch reads) and, after the sink has the rows, ``commits/<n>``. A query that
dies between the two re-runs batch ``n`` from ``offsets/<n>`` on restart, and
every row it had already emitted reaches the sink again: the at-least-once
part of delivery. Apache Spark's own real-time tests simulate it by purging
the commit log; :func:`rewind_to_batch` does the same on a stopped query's
checkpoint folder so the lab can show what a replay does downstream.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def _numbered(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def committed_batches(checkpoint: str | os.PathLike) -> list[int]:
    """Batch ids with a commit file in ``checkpoint``."""
    return _numbered(Path(checkpoint) / "commits")


def rewind_to_batch(checkpoint: str | os.PathLike, batch_id: int) -> None:
    """Forget the commit of ``batch_id`` and everything after it (the query must be stopped).

    On restart the query re-runs ``batch_id`` with the offsets it recorded.
    Raises ``ValueError`` when ``batch_id`` has no recorded offsets.
    """
    root = Path(checkpoint)
    offsets = _numbered(root / "offsets")
    if batch_id not in offsets:
        raise ValueError(f"{checkpoint}: no offsets recorded for batch {batch_id} (have {offsets})")
    for n in _numbered(root / "commits"):
        if n >= batch_id:
            (root / "commits" / str(n)).unlink()
    for n in offsets:
        if n > batch_id:
            (root / "offsets" / str(n)).unlink()
    for crc in list((root / "commits").glob(".*.crc")) + list((root / "offsets").glob(".*.crc")):
        name = crc.name[1:-4]
        if name.isdigit() and not (crc.parent / name).exists():
            crc.unlink()


def wait_for_commit(query, checkpoint: str | os.PathLike, batch_id: int, timeout: float = 120.0) -> None:
    """Block until ``query`` committed ``batch_id``; fail early when the query dies.

    The timeout only catches a hang; it is not a latency assertion.
    """
    deadline = time.monotonic() + timeout
    while batch_id not in committed_batches(checkpoint):
        if not query.isActive:
            raise RuntimeError(f"query died: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} not committed after {timeout:.0f} s")
        time.sleep(0.2)
