"""The attribution rules of ``examples/ad_attribution.py`` in plain Python, for checking Spark's output.

Written independently of the ``StatefulProcessor`` (plain dicts, an explicit
clock) so a test can compare the two row for row. The rules:

- a transaction's first event opens a window ending ``window_ms`` later (by
  the clock that delivers it); an event at or after that end belongs to a
  new window;
- the first request of a window is kept, later ones with it are ignored;
  an ack id seen before in the window is ignored;
- every distinct ack of a window with a request gives one ``matched`` row;
- at the window's end: a request without acks gives ``unmatched_request``,
  each ack of a window without a request gives ``unmatched_ack``.

Each output row is a dict with the columns of ``ATTRIBUTION_SCHEMA``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from examples.ad_attribution import MATCHED, UNMATCHED_ACK, UNMATCHED_REQUEST


@dataclass
class _Window:
    end_ms: int
    request: Mapping[str, Any] | None = None
    acks: dict[str, int] = field(default_factory=dict)  # ack_id -> event_ms, arrival order


def _row(tid: str, request: Mapping[str, Any] | None, ack_id: str | None, ack_ms: int | None,
         outcome: str) -> dict[str, Any]:
    request_ms = request["event_ms"] if request else None
    return {
        "transaction_id": tid,
        "request_id": request["request_id"] if request else "",
        "ack_id": ack_id or "",
        "outcome": outcome,
        "ad_id": request["ad_id"] if request else None,
        "request_ms": request_ms,
        "ack_ms": ack_ms,
        "latency_ms": ack_ms - request_ms if outcome == MATCHED else None,
    }


class ReferenceAttribution:
    """Feed events with :meth:`on_request` / :meth:`on_ack` and move time with :meth:`advance`."""

    def __init__(self, window_ms: int):
        if window_ms <= 0:
            raise ValueError(f"window_ms must be positive, got {window_ms}")
        self.window_ms = window_ms
        self.windows: dict[str, _Window] = {}
        self.now_ms: int | None = None

    def advance(self, now_ms: int) -> list[dict[str, Any]]:
        """Close every window that ended at or before ``now_ms``; return their rows."""
        if self.now_ms is not None and now_ms < self.now_ms:
            raise ValueError(f"time went backwards: {now_ms} < {self.now_ms}")
        self.now_ms = now_ms
        out: list[dict[str, Any]] = []
        for tid in [t for t, w in self.windows.items() if w.end_ms <= now_ms]:
            out += self._close(tid, self.windows.pop(tid))
        return out

    def _close(self, tid: str, window: _Window) -> list[dict[str, Any]]:
        if window.request is not None:
            return [] if window.acks else [_row(tid, window.request, None, None, UNMATCHED_REQUEST)]
        return [_row(tid, None, ack_id, ms, UNMATCHED_ACK) for ack_id, ms in window.acks.items()]

    def _window(self, tid: str, now_ms: int) -> tuple[_Window, list[dict[str, Any]]]:
        closed = self.advance(now_ms)
        if tid not in self.windows:
            self.windows[tid] = _Window(end_ms=now_ms + self.window_ms)
        return self.windows[tid], closed

    def on_request(self, request: Mapping[str, Any], now_ms: int) -> list[dict[str, Any]]:
        window, out = self._window(request["transaction_id"], now_ms)
        if window.request is None:
            window.request = dict(request)
            out += [_row(request["transaction_id"], window.request, a, ms, MATCHED)
                    for a, ms in window.acks.items()]
        return out

    def on_ack(self, ack: Mapping[str, Any], now_ms: int) -> list[dict[str, Any]]:
        window, out = self._window(ack["transaction_id"], now_ms)
        if ack["ack_id"] not in window.acks:
            window.acks[ack["ack_id"]] = ack["event_ms"]
            if window.request is not None:
                out.append(_row(ack["transaction_id"], window.request, ack["ack_id"],
                                ack["event_ms"], MATCHED))
        return out

    def on_event(self, event: Mapping[str, Any], now_ms: int) -> list[dict[str, Any]]:
        """An event from :mod:`pack_lab.attribution_events` (``stream`` says which kind)."""
        if event["stream"] == "request":
            return self.on_request(event, now_ms)
        return self.on_ack(event, now_ms)

    def open_windows(self) -> int:
        return len(self.windows)


def expected_output(events: Iterable[Mapping[str, Any]], window_ms: int,
                    clock: str = "arrival_ms") -> list[dict[str, Any]]:
    """Every row the rules give for ``events`` delivered at their ``clock`` times, windows all closed.

    Events with the same clock value are delivered in the order given.
    """
    ref = ReferenceAttribution(window_ms)
    out: list[dict[str, Any]] = []
    last = 0
    for event in sorted(events, key=lambda e: e[clock]):
        out += ref.on_event(event, event[clock])
        last = event[clock]
    out += ref.advance(last + window_ms)
    return out
