"""Upstream event simulator: a seeded stand-in for a Kafka producer that feeds the RTM lab source at a set rate.

Two parts, both free of Spark:

- :class:`EventGenerator` makes plain dict rows in :data:`EVENT_SCHEMA_DDL`,
  deterministically from a seed: ``num_keys`` devices, a payload of
  ``payload_bytes`` characters, and a fixed share of *duplicates* -- an
  earlier event (same ``event_id``, ``device_id``, ``event_ms``, ``value``,
  ``payload``) sent again later with a new ``seq`` and a later ``sent_ms``, as a
  producer retry does.
- :class:`UpstreamFeeder` runs a generator on a background thread and hands
  rows to anything with ``add(rows, partition=None)`` -- normally
  :class:`pack_lab.rtm_lab.RealTimeMemorySource` -- in small chunks (one
  ``add()`` per partition per chunk) at ``rows_per_second``. It never runs a
  Spark job: ``add()`` is a single py4j call that appends to the in-memory
  stream.

The duplicate count is exact, not random: after ``n`` rows,
``floor(n * duplicate_pct / 100)`` of them are duplicates (see
:func:`expected_counts`), so a test knows the exact output of a dedup
query before it starts. ``value`` is always a multiple of 0.25, so sums are
exact in floating point whatever order Spark adds them in.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

#: Columns of every generated row, in order (a DDL string the lab source accepts).
#: ``event_ms`` is the producer's clock when the event was made (a duplicate
#: keeps its original's); ``sent_ms`` is the wall clock when the row was handed
#: to the source; ``seq`` numbers rows in send order, duplicates included.
EVENT_SCHEMA_DDL = (
    "event_id STRING, device_id STRING, event_ms BIGINT, sent_ms BIGINT, "
    "value DOUBLE, payload STRING, seq BIGINT"
)

EVENT_COLUMNS = ("event_id", "device_id", "event_ms", "sent_ms", "value", "payload", "seq")


@dataclass(frozen=True)
class UpstreamSpec:
    """What the simulated upstream produces.

    ``total_rows`` or ``duration_s`` bound a run (``total_rows`` wins; with
    neither the feeder runs until :meth:`UpstreamFeeder.stop`).
    ``start_ms`` anchors the event clock: row ``seq`` gets
    ``event_ms = start_ms + seq * 1000 / rows_per_second`` (a duplicate keeps
    its original's); ``None`` means the wall clock when feeding starts.
    ``duplicate_window`` is how many recent distinct events a duplicate may
    repeat.
    """

    rows_per_second: float = 1000.0
    num_keys: int = 100
    duplicate_pct: float = 0.0
    num_partitions: int = 1
    payload_bytes: int = 64
    total_rows: int | None = None
    duration_s: float | None = None
    seed: int = 7
    start_ms: int | None = None
    duplicate_window: int = 1000
    id_prefix: str = "evt"

    def __post_init__(self) -> None:
        if not self.rows_per_second > 0:
            raise ValueError(f"rows_per_second must be > 0, got {self.rows_per_second}")
        if self.num_keys < 1:
            raise ValueError(f"num_keys must be at least 1, got {self.num_keys}")
        if not 0 <= self.duplicate_pct < 100:
            raise ValueError(f"duplicate_pct must be in [0, 100), got {self.duplicate_pct}")
        if self.num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {self.num_partitions}")
        if self.payload_bytes < 0:
            raise ValueError(f"payload_bytes must be >= 0, got {self.payload_bytes}")
        if self.total_rows is not None and self.total_rows < 0:
            raise ValueError(f"total_rows must be >= 0, got {self.total_rows}")
        if self.duration_s is not None and self.duration_s < 0:
            raise ValueError(f"duration_s must be >= 0, got {self.duration_s}")
        if self.duplicate_window < 1:
            raise ValueError(f"duplicate_window must be at least 1, got {self.duplicate_window}")

    @property
    def row_limit(self) -> int | None:
        """Rows in the whole run, or ``None`` for an open-ended run."""
        if self.total_rows is not None:
            return self.total_rows
        if self.duration_s is not None:
            return int(round(self.rows_per_second * self.duration_s))
        return None


def duplicates_in_first(n: int, duplicate_pct: float) -> int:
    """How many of the first ``n`` rows are duplicates: ``floor(n * pct / 100)``."""
    # Integer arithmetic on a fixed-point percentage avoids float rounding at exact multiples.
    scaled = int(round(duplicate_pct * 1_000_000))
    return (n * scaled) // 100_000_000


def expected_counts(total_rows: int, duplicate_pct: float) -> tuple[int, int]:
    """``(duplicates, distinct_events)`` among ``total_rows`` generated rows."""
    dups = duplicates_in_first(total_rows, duplicate_pct)
    return dups, total_rows - dups


def partition_for(device_id: str, num_partitions: int) -> int:
    """Source partition of a key, stable across runs (like Kafka's key partitioner)."""
    return zlib.crc32(device_id.encode("utf-8")) % num_partitions


class EventGenerator:
    """Deterministic row factory for one :class:`UpstreamSpec` (no threads, no I/O)."""

    def __init__(self, spec: UpstreamSpec, start_ms: int | None = None):
        self.spec = spec
        if start_ms is None:
            start_ms = spec.start_ms if spec.start_ms is not None else int(time.time() * 1000)
        self.start_ms = int(start_ms)
        self._rng = random.Random(spec.seed)
        filler = "abcdefghijklmnopqrstuvwxyz0123456789"
        self._payload_base = "".join(self._rng.choice(filler) for _ in range(2 * spec.payload_bytes + 1))
        self._recent: deque[dict[str, Any]] = deque(maxlen=spec.duplicate_window)
        self.rows_generated = 0
        self.duplicates_generated = 0

    @property
    def distinct_events(self) -> int:
        return self.rows_generated - self.duplicates_generated

    def _new_event(self, seq: int) -> dict[str, Any]:
        spec = self.spec
        number = self.distinct_events
        offset = number % (spec.payload_bytes + 1)
        return {
            "event_id": f"{spec.id_prefix}-{number:010d}",
            "device_id": f"device-{self._rng.randrange(spec.num_keys):05d}",
            "event_ms": self.start_ms + int(seq * 1000 / spec.rows_per_second),
            "value": self._rng.randrange(0, 40_000) / 4,
            "payload": self._payload_base[offset:offset + spec.payload_bytes],
        }

    def next_row(self) -> dict[str, Any]:
        """The next row; ``sent_ms`` is ``None`` until a feeder stamps it."""
        seq = self.rows_generated
        is_dup = duplicates_in_first(seq + 1, self.spec.duplicate_pct) > self.duplicates_generated
        if is_dup and self._recent:
            event = self._recent[self._rng.randrange(len(self._recent))]
            self.duplicates_generated += 1
        else:
            event = self._new_event(seq)
            self._recent.append(event)
        self.rows_generated += 1
        row = dict(event)
        row["sent_ms"] = None
        row["seq"] = seq
        return row

    def take(self, n: int) -> list[dict[str, Any]]:
        return [self.next_row() for _ in range(n)]


def generate_rows(spec: UpstreamSpec, n: int | None = None, start_ms: int | None = None,
                  sent_ms: int | None = None) -> list[dict[str, Any]]:
    """``n`` rows (default: the spec's whole run) without pacing, e.g. to compute expected output."""
    count = n if n is not None else spec.row_limit
    if count is None:
        raise ValueError("give n, or a spec with total_rows or duration_s")
    rows = EventGenerator(spec, start_ms).take(count)
    if sent_ms is not None:
        for row in rows:
            row["sent_ms"] = sent_ms
    return rows


class RowSink(Protocol):
    """What the feeder writes to: ``RealTimeMemorySource`` or any test double."""

    num_partitions: int

    def add(self, rows: Iterable[dict[str, Any]], partition: int | None = None) -> int: ...


@dataclass(frozen=True)
class FeedStats:
    """A snapshot of a feeder's counters."""

    rows_sent: int
    duplicates_sent: int
    distinct_events: int
    chunks_sent: int
    elapsed_s: float
    behind_rows: int
    done: bool

    @property
    def rows_per_second(self) -> float:
        return self.rows_sent / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def line(self) -> str:
        """One human-readable progress line."""
        return (f"[upstream] {self.elapsed_s:6.1f}s sent={self.rows_sent} "
                f"({self.rows_per_second:,.0f} rows/s) dups={self.duplicates_sent} "
                f"distinct={self.distinct_events} behind={self.behind_rows}"
                + (" done" if self.done else ""))


def print_progress(stats: FeedStats) -> None:
    """A ready-made ``on_progress`` callback."""
    print(stats.line(), flush=True)


class UpstreamFeeder:
    """Feed generated rows into ``sink`` on a background thread at the spec's rate.

    Every ``tick_s`` the thread works out how many rows are due
    (``rows_per_second * elapsed``), generates at most ``max_chunk_rows`` of
    them, stamps ``sent_ms`` and hands them over with one ``add()`` per
    source partition. If the sink is slower than the target rate the
    feeder falls behind (``behind_rows``) rather than building huge chunks.
    ``keep_rows=True`` keeps every sent row in :attr:`sent_rows` for tests.
    """

    def __init__(self, sink: RowSink, spec: UpstreamSpec, *, max_chunk_rows: int | None = None,
                 tick_s: float = 0.02, on_progress: Callable[[FeedStats], None] | None = None,
                 progress_every_s: float = 1.0, keep_rows: bool = False):
        sink_partitions = int(getattr(sink, "num_partitions", spec.num_partitions))
        if sink_partitions != spec.num_partitions:
            raise ValueError(f"spec.num_partitions={spec.num_partitions} but the sink has "
                             f"{sink_partitions} partitions")
        self.sink = sink
        self.spec = spec
        self.max_chunk_rows = max_chunk_rows or max(1, int(spec.rows_per_second * 0.05))
        self.tick_s = tick_s
        self.on_progress = on_progress
        self.progress_every_s = progress_every_s
        self.keep_rows = keep_rows
        self.sent_rows: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.generator: EventGenerator | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._t_end: float | None = None
        self._chunks = 0
        self._behind = 0

    # -- control -----------------------------------------------------------
    def start(self) -> UpstreamFeeder:
        if self._thread is not None:
            raise RuntimeError("feeder already started")
        self.generator = EventGenerator(self.spec)
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="upstream-feeder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ask the thread to stop after the chunk in flight."""
        self._stop.set()

    def join(self, timeout: float | None = None, raise_error: bool = True) -> FeedStats:
        """Wait for the run to end (or ``timeout``); re-raise a sink error unless told not to."""
        if self._thread is not None:
            self._thread.join(timeout)
        if raise_error and self.error is not None:
            raise RuntimeError(f"upstream feeder failed: {self.error!r}") from self.error
        return self.stats()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> UpstreamFeeder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.join(raise_error=False)

    # -- counters ----------------------------------------------------------
    def stats(self) -> FeedStats:
        with self._lock:
            gen = self.generator
            end = self._t_end if self._t_end is not None else time.monotonic()
            return FeedStats(
                rows_sent=gen.rows_generated if gen else 0,
                duplicates_sent=gen.duplicates_generated if gen else 0,
                distinct_events=gen.distinct_events if gen else 0,
                chunks_sent=self._chunks,
                elapsed_s=(end - self._t0) if self._thread else 0.0,
                behind_rows=self._behind,
                done=self._t_end is not None,
            )

    # -- the thread --------------------------------------------------------
    def _send(self, rows: list[dict[str, Any]]) -> None:
        now_ms = int(time.time() * 1000)
        parts: dict[int, list[dict[str, Any]]] = {}
        for row in rows:
            row["sent_ms"] = now_ms
            parts.setdefault(partition_for(row["device_id"], self.spec.num_partitions), []).append(row)
        for partition in sorted(parts):
            self.sink.add(parts[partition], partition=partition)

    def _run(self) -> None:
        gen = self.generator
        assert gen is not None
        limit = self.spec.row_limit
        rate = self.spec.rows_per_second
        next_progress = self._t0 + self.progress_every_s
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                due = int((now - self._t0) * rate)
                if limit is not None:
                    due = min(due, limit)
                with self._lock:
                    pending = due - gen.rows_generated
                    n = min(pending, self.max_chunk_rows)
                    rows = gen.take(n) if n > 0 else []
                    self._behind = max(0, pending - n)
                if rows:
                    self._send(rows)
                    if self.keep_rows:
                        self.sent_rows.extend(rows)
                    with self._lock:
                        self._chunks += 1
                if self.on_progress is not None and now >= next_progress:
                    next_progress = now + self.progress_every_s
                    self.on_progress(self.stats())
                if limit is not None and gen.rows_generated >= limit:
                    break
                if not rows or self._behind == 0:
                    self._stop.wait(self.tick_s)
        except BaseException as exc:  # reported through join()
            self.error = exc
        finally:
            with self._lock:
                self._t_end = time.monotonic()
            if self.on_progress is not None:
                self.on_progress(self.stats())


class CountingSink:
    """A sink that only counts what it is given (for dry runs and the CLI)."""

    def __init__(self, num_partitions: int = 1):
        self.num_partitions = num_partitions
        self.rows_added = 0
        self.calls = 0

    def add(self, rows: Iterable[dict[str, Any]], partition: int | None = None) -> int:
        n = len(list(rows))
        self.rows_added += n
        self.calls += 1
        return n


def main(argv: list[str] | None = None) -> int:
    """Dry run into a counting sink: shows the rate, duplicates and progress lines."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows-per-second", type=float, default=1000.0)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--duplicate-pct", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--payload-bytes", type=int, default=64)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    spec = UpstreamSpec(rows_per_second=args.rows_per_second, duration_s=args.duration,
                        num_keys=args.keys, duplicate_pct=args.duplicate_pct,
                        num_partitions=args.partitions, payload_bytes=args.payload_bytes,
                        seed=args.seed)
    sink = CountingSink(args.partitions)
    feeder = UpstreamFeeder(sink, spec, on_progress=print_progress)
    stats = feeder.start().join()
    dups, distinct = expected_counts(stats.rows_sent, spec.duplicate_pct)
    print(f"[upstream] expected duplicates={dups} distinct={distinct}; sink got {sink.rows_added} rows "
          f"in {sink.calls} add() calls")
    return 0


def with_spec(spec: UpstreamSpec, **changes: Any) -> UpstreamSpec:
    """A copy of ``spec`` with some fields changed (validated again)."""
    return replace(spec, **changes)


if __name__ == "__main__":  # pragma: no cover - manual entry point
    raise SystemExit(main())
