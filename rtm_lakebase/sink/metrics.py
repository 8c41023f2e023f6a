"""Counters and flush-latency percentiles kept by the Postgres foreach writer.

One :class:`SinkMetrics` per writer instance (so per Spark task). It counts
rows received, rows written, rows skipped (stale versions or unchanged rows),
flushes and retries, and keeps the most recent flush durations to report
p50/p95/p99. ``snapshot()`` returns a plain dict for logs and tests.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


def nearest_rank(values, q: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``q`` % of values at or below it."""
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile of ``values`` (``pct`` in 0..100); ``None`` when empty."""
    if not values:
        return None
    return nearest_rank(values, pct)


@dataclass
class SinkMetrics:
    """What one writer did. Durations are in milliseconds."""

    rows_received: int = 0
    rows_written: int = 0
    rows_deduplicated: int = 0
    rows_skipped_stale: int = 0
    rows_skipped_unchanged: int = 0
    flushes: int = 0
    timer_flushes: int = 0
    retries: int = 0            # connection lost: reconnected and retried
    reconnects: int = 0
    conflict_retries: int = 0   # deadlock / serialization failure / lock timeout: retried
    window: int = 10_000
    flush_ms: deque = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.flush_ms = deque(self.flush_ms, maxlen=self.window)

    def record_flush(self, duration_ms: float, written: int, skipped: int, *,
                     stale: bool, by_timer: bool) -> None:
        self.flushes += 1
        self.timer_flushes += int(by_timer)
        self.rows_written += written
        if stale:
            self.rows_skipped_stale += skipped
        else:
            self.rows_skipped_unchanged += skipped
        self.flush_ms.append(duration_ms)

    def flush_percentile(self, pct: float) -> float | None:
        return percentile(list(self.flush_ms), pct)

    def snapshot(self) -> dict[str, float | int | None]:
        return {
            "rows_received": self.rows_received,
            "rows_written": self.rows_written,
            "rows_deduplicated": self.rows_deduplicated,
            "rows_skipped_stale": self.rows_skipped_stale,
            "rows_skipped_unchanged": self.rows_skipped_unchanged,
            "flushes": self.flushes,
            "timer_flushes": self.timer_flushes,
            "retries": self.retries,
            "reconnects": self.reconnects,
            "conflict_retries": self.conflict_retries,
            "flush_ms_p50": self.flush_percentile(50),
            "flush_ms_p95": self.flush_percentile(95),
            "flush_ms_p99": self.flush_percentile(99),
            "flush_ms_max": max(self.flush_ms) if self.flush_ms else None,
        }
