"""What the example pipelines must emit, computed in plain Python: the tests' oracles.

The ``expected_*`` functions and :func:`latest_updates` check the pipelines of
``examples/real_time_pipelines.py``; :func:`output_key` is the pair key of an
``examples/ad_attribution.py`` output row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from examples.ad_attribution import PAIR_KEY


def expected_dedup(rows: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """event_id -> the first row sent with that id (lowest ``seq``)."""
    first: dict[str, Mapping[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["seq"]):
        first.setdefault(row["event_id"], row)
    return first


def expected_window_stats(rows: Iterable[Mapping[str, Any]], window_ms: int
                          ) -> dict[tuple[str, int], tuple[int, float, float]]:
    """(device_id, window_start_ms) -> (events, value_sum, value_max) over every row sent."""
    stats: dict[tuple[str, int], tuple[int, float, float]] = {}
    for row in rows:
        key = (row["device_id"], row["event_ms"] - row["event_ms"] % window_ms)
        n, total, top = stats.get(key, (0, 0.0, float("-inf")))
        stats[key] = (n + 1, total + row["value"], max(top, row["value"]))
    return stats


def expected_device_totals(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[int, float, int]]:
    """device_id -> (events, value_sum, last_event_ms) over every row sent."""
    totals: dict[str, tuple[int, float, int]] = {}
    for row in rows:
        n, total, last = totals.get(row["device_id"], (0, 0.0, row["event_ms"]))
        totals[row["device_id"]] = (n + 1, total + row["value"], max(last, row["event_ms"]))
    return totals


def latest_updates(rows: Iterable[Mapping[str, Any]], key: tuple[str, ...],
                   counter: str = "events") -> dict[tuple[Any, ...], Mapping[str, Any]]:
    """Collapse update-mode output to the newest row per key.

    Update mode re-emits a key each time it changes; rows from different
    tasks or batches are not ordered in the collected output, so the newest
    is taken as the one with the highest ``counter`` (a count only grows).
    """
    newest: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in rows:
        k = tuple(row[c] for c in key)
        if k not in newest or row[counter] > newest[k][counter]:
            newest[k] = row
    return newest


def output_key(row: Any) -> tuple[str, str, str]:
    """The pair key of an output row (a ``Row`` or a dict)."""
    return tuple(row[c] for c in PAIR_KEY)  # type: ignore[return-value]
