"""Seeded generator of ad requests and acks, with the faults attribution must survive, and a feeder.

Each transaction gets (normally) one request and one ack. Knobs, as
percentages of transactions (``missing_request_pct`` is drawn first and
excludes ``missing_ack_pct``):

- ``out_of_order_pct``: the ack is delivered before its request;
- ``missing_request_pct`` / ``missing_ack_pct``: one side never comes;
- ``duplicate_ack_pct``: the ack is delivered twice (same ``ack_id``);
- ``late_pct``: the second event of the pair is delivered after the window
  has closed (``window_ms + late_margin_ms`` after the first).

Every event is a dict with ``stream`` (``"request"`` or ``"ack"``), its
columns (``REQUEST_SCHEMA_DDL`` / ``ACK_SCHEMA_DDL``), ``arrival_ms``: when
to deliver it, in ms after the feed starts, and ``late``: delivered after
its transaction's window closed. ``rate_per_second``
transactions start per second. On-time events of a transaction arrive
within ``max_spread_ms`` of its first one, and late ones at least
``late_margin_ms`` after its window ends, so the outcome does not depend on
when a micro-batch happens to run as long as batches lag by less than
``late_margin_ms`` (and ``max_spread_ms`` + lag stays under ``window_ms``).

``feed(events, requests_source, acks_source)`` delivers them on schedule to
two lab sources (:class:`pack_lab.rtm_lab.RealTimeMemorySource`).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol

#: The columns each stream carries (the lab source refuses any other key).
REQUEST_COLUMNS = ("transaction_id", "request_id", "ad_id", "event_ms")
ACK_COLUMNS = ("transaction_id", "ack_id", "event_ms")


@dataclass(frozen=True)
class AttributionSpec:
    transactions: int = 100
    rate_per_second: float = 100.0
    out_of_order_pct: float = 10.0
    missing_request_pct: float = 5.0
    missing_ack_pct: float = 10.0
    duplicate_ack_pct: float = 10.0
    late_pct: float = 5.0
    window_ms: int = 6_000
    late_margin_ms: int = 4_000
    max_ack_delay_ms: int = 400      # event-time gap request -> ack, and its delivery gap
    seed: int = 0
    start_ms: int = 1_700_000_000_000  # event time of the first request
    id_prefix: str = "tx"
    ads: int = 20

    def __post_init__(self) -> None:
        for name in ("out_of_order_pct", "missing_request_pct", "missing_ack_pct",
                     "duplicate_ack_pct", "late_pct"):
            value = getattr(self, name)
            if not 0 <= value <= 100:
                raise ValueError(f"{name} must be within 0..100, got {value}")
        if self.transactions < 0:
            raise ValueError(f"transactions must not be negative, got {self.transactions}")
        if self.rate_per_second <= 0:
            raise ValueError(f"rate_per_second must be positive, got {self.rate_per_second}")
        if self.window_ms <= 0 or self.late_margin_ms < 0 or self.max_ack_delay_ms < 1:
            raise ValueError("window_ms must be positive, late_margin_ms >= 0, max_ack_delay_ms >= 1")
        if self.max_spread_ms >= self.window_ms:
            raise ValueError(f"window_ms ({self.window_ms}) must exceed the on-time spread "
                             f"({self.max_spread_ms} ms = 2 x max_ack_delay_ms)")

    @property
    def max_spread_ms(self) -> int:
        """Latest on-time delivery after a transaction's first event (ack delay + duplicate delay)."""
        return 2 * self.max_ack_delay_ms

    @property
    def duration_ms(self) -> int:
        """Delivery time of the last event, at most."""
        start_last = int((self.transactions - 1) / self.rate_per_second * 1000) if self.transactions else 0
        return start_last + self.window_ms + self.late_margin_ms + self.max_spread_ms


def generate(spec: AttributionSpec) -> list[dict[str, Any]]:
    """All events of ``spec``, sorted by ``arrival_ms`` (ties keep generation order)."""
    rng = random.Random(spec.seed)
    events: list[dict[str, Any]] = []
    for i in range(spec.transactions):
        tid = f"{spec.id_prefix}-{i:06d}"
        first = int(i / spec.rate_per_second * 1000)      # delivery of the pair's first event
        delay = rng.randint(1, spec.max_ack_delay_ms)
        request_ms = spec.start_ms + first
        request = {"stream": "request", "transaction_id": tid, "request_id": f"{tid}-r",
                   "ad_id": f"ad-{rng.randrange(spec.ads)}", "event_ms": request_ms}
        ack = {"stream": "ack", "transaction_id": tid, "ack_id": f"{tid}-a",
               "event_ms": request_ms + delay}
        missing_request = rng.random() * 100 < spec.missing_request_pct
        missing_ack = not missing_request and rng.random() * 100 < spec.missing_ack_pct
        out_of_order = rng.random() * 100 < spec.out_of_order_pct
        late = rng.random() * 100 < spec.late_pct
        duplicate = rng.random() * 100 < spec.duplicate_ack_pct
        second_at = first + delay
        if late:
            second_at = first + spec.window_ms + spec.late_margin_ms + delay
        first_event, second_event = (ack, request) if out_of_order else (request, ack)
        pair = [(first_event, first), (second_event, second_at)]
        for event, at in pair:
            if event is request and missing_request or event is ack and missing_ack:
                continue
            is_late = late and event is second_event
            events.append(dict(event, arrival_ms=at, late=is_late))
            if event is ack and duplicate:
                events.append(dict(event, arrival_ms=at + rng.randint(1, spec.max_ack_delay_ms),
                                   late=is_late))
    events.sort(key=lambda e: e["arrival_ms"])
    return events


def split_streams(events: Iterable[Mapping[str, Any]]) -> tuple[list[dict], list[dict]]:
    """(requests, acks) with only each stream's columns, in delivery order."""
    requests = [{c: e[c] for c in REQUEST_COLUMNS} for e in events if e["stream"] == "request"]
    acks = [{c: e[c] for c in ACK_COLUMNS} for e in events if e["stream"] == "ack"]
    return requests, acks


class _Source(Protocol):
    def add(self, rows: Iterable[Mapping[str, Any]]) -> int: ...


def feed(events: list[Mapping[str, Any]], requests: _Source, acks: _Source, *,
         chunk_ms: int = 100, progress: Callable[[str], None] | None = None,
         stop: threading.Event | None = None) -> int:
    """Deliver ``events`` on their ``arrival_ms`` schedule (from the first one's), in chunks; return the count.

    One ``add`` per stream per chunk (the lab source is slow per call, fast
    per row). ``progress`` gets a line about once a second.
    """
    start = time.monotonic()
    origin = events[0]["arrival_ms"] if events else 0
    sent = 0
    last_report = start
    i = 0
    while i < len(events):
        if stop is not None and stop.is_set():
            break
        due = events[i]["arrival_ms"] - events[i]["arrival_ms"] % chunk_ms + chunk_ms
        j = i
        while j < len(events) and events[j]["arrival_ms"] < due:
            j += 1
        wait = start + (events[i]["arrival_ms"] - origin) / 1000 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        chunk_requests, chunk_acks = split_streams(events[i:j])
        if chunk_requests:
            requests.add(chunk_requests)
        if chunk_acks:
            acks.add(chunk_acks)
        sent += j - i
        i = j
        if progress is not None and time.monotonic() - last_report >= 1:
            last_report = time.monotonic()
            progress(f"attribution feed: {sent}/{len(events)} events")
    return sent
