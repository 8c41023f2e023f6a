"""A `foreach` writer that appends each row as a JSON line to a file: for checking query output.

Tests and benchmarks use it to see exactly which rows a streaming query
emitted, in real-time mode as well as micro-batch. Each task writes its own
file (``part-<partition>-epoch-<epoch>-<uuid>.jsonl``) and flushes after every
row, so rows are visible to the reader while a real-time long batch is still
running. ``read_rows(folder)`` returns everything written so far.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any


class JsonLinesForeachWriter:
    """Picklable ``foreach`` writer; ``stamp_ms`` adds the sink's wall clock as ``_sink_ms``."""

    def __init__(self, folder: str | os.PathLike, stamp_ms: bool = False):
        self.folder = str(folder)
        self.stamp_ms = stamp_ms
        self._file = None

    def open(self, partition_id: int, epoch_id: int) -> bool:
        Path(self.folder).mkdir(parents=True, exist_ok=True)
        name = f"part-{partition_id}-epoch-{epoch_id}-{uuid.uuid4().hex[:8]}.jsonl"
        self._file = open(os.path.join(self.folder, name), "a", encoding="utf-8")
        return True

    def process(self, row: Any) -> None:
        record = row.asDict(recursive=True) if hasattr(row, "asDict") else dict(row)
        if self.stamp_ms:
            record["_sink_ms"] = int(time.time() * 1000)
        self._file.write(json.dumps(record, default=str) + "\n")
        self._file.flush()

    def close(self, error: BaseException | None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_rows(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """All rows written under ``folder`` so far (a partly written last line is skipped)."""
    rows: list[dict[str, Any]] = []
    base = Path(folder)
    if not base.exists():
        return rows
    for path in sorted(base.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def wait_for_rows(folder: str | os.PathLike, count: int, timeout: float = 60.0,
                  poll: float = 0.2, query: Any = None) -> list[dict[str, Any]]:
    """Poll until at least ``count`` rows are written; raise ``TimeoutError`` otherwise.

    Pass the streaming ``query`` to fail fast (with its exception) if it dies meanwhile.
    """
    deadline = time.monotonic() + timeout
    while True:
        rows = read_rows(folder)
        if len(rows) >= count:
            return rows
        if query is not None and not query.isActive:
            error = query.exception()
            raise RuntimeError(f"query stopped after {len(rows)} of {count} rows: {error}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(rows)} of {count} rows after {timeout:.0f} s")
        time.sleep(poll)
