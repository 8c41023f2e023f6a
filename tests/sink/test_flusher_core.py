"""The sink's concurrency core on its own: RowBuffer, Flusher and back-pressure, with a fake clock and target.

No Postgres and no sleeping on the real clock: the dwell timer runs on a clock
the test moves (``Flusher.wake()`` makes the thread look at it), and the
"target" is a function that records batches and can be held or made to fail.
Waits are on events with a generous timeout that only catches a hang.
"""

from __future__ import annotations

import logging
import threading

import pytest

from rtm_lakebase.sink.buffer import RowBuffer
from rtm_lakebase.sink.errors import BadRowError, SinkError
from rtm_lakebase.sink.flusher import Flusher

HANG = 60  # seconds; only a hang takes this long


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class FakeTarget:
    """write(batch, by_timer) records each batch; `hold()` makes writes wait for `release()`; `fail` raises."""

    def __init__(self):
        self.batches: list[tuple[list[tuple], bool]] = []
        self.written = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)
        self.fail: BaseException | None = None
        self.cancelled = threading.Event()

    def hold(self):
        self.gate.clear()

    def release(self):
        self.gate.set()

    def write(self, batch, by_timer):
        self.entered.release()
        if not self.gate.wait(HANG) or self.cancelled.is_set():
            raise SinkError("cancelled" if self.cancelled.is_set() else "held too long")
        if self.fail is not None:
            raise self.fail
        with self.written:
            self.batches.append((list(batch), by_timer))
            self.written.notify_all()

    def cancel(self):
        self.cancelled.set()
        self.gate.set()

    def wait_batches(self, n):
        with self.written:
            assert self.written.wait_for(lambda: len(self.batches) >= n, HANG), self.batches
        return self.batches

    def wait_entered(self):
        assert self.entered.acquire(timeout=HANG), "no write started"


def flusher(target, clock, max_rows=3, dwell_ms=1000, key=("k",), **kw):
    buffer = RowBuffer(("k", "v"), key)
    return Flusher(buffer, target.write, max_rows, dwell_ms, name="test-flusher", clock=clock,
                   cancel=target.cancel, **kw)


# -- RowBuffer -------------------------------------------------------------------------------

def test_buffer_keeps_one_row_per_key_last_wins_and_hands_over_sorted():
    b = RowBuffer(("k", "v"), ("k",))
    for row in [(3, "a"), (1, "b"), (3, "c"), (2, "d")]:
        b.add(row)
    assert len(b) == 3 and b.deduplicated == 1
    assert b.take() == [(1, "b"), (2, "d"), (3, "c")]
    assert len(b) == 0 and b.oldest is None


def test_buffer_version_and_first_wins_rules():
    versioned = RowBuffer(("k", "v"), ("k",), version_column="v")
    for row in [(1, 5), (1, 4), (1, 5), (1, 6)]:
        versioned.add(row)
    assert versioned.take() == [(1, 6)]  # only a strictly newer version replaces
    first = RowBuffer(("k", "v"), ("k",), first_wins=True)
    for row in [(1, "a"), (1, "b")]:
        first.add(row)
    assert first.take() == [(1, "a")]


def test_buffer_rejects_a_null_key_naming_the_column():
    b = RowBuffer(("k", "v"), ("k",))
    with pytest.raises(BadRowError) as info:
        b.add((None, "x"))
    assert info.value.column == "k"


def test_append_buffer_keeps_every_row_in_order():
    b = RowBuffer(("k", "v"))
    for row in [(2, "a"), (1, "b"), (2, "a")]:
        b.add(row)
    assert b.take() == [(2, "a"), (1, "b"), (2, "a")]


# -- Flusher: size and time -------------------------------------------------------------------

def test_a_full_buffer_is_handed_over_at_once_in_order():
    target, clock = FakeTarget(), Clock()
    f = flusher(target, clock, max_rows=2)
    for k in (5, 4, 3, 2):
        f.add((k, "x"))
    batches = target.wait_batches(2)
    assert batches == [([(4, "x"), (5, "x")], False), ([(2, "x"), (3, "x")], False)]
    f.finish()


def test_the_dwell_timer_writes_the_tail_when_the_clock_passes_it_and_not_before():
    target, clock = FakeTarget(), Clock()
    f = flusher(target, clock, max_rows=100, dwell_ms=1000)
    f.add((1, "tail"))
    clock.now += 0.999
    f.wake()
    f.add((2, "tail"))  # add() takes the lock the thread's check takes: the check ran and did not flush
    assert target.batches == []
    clock.now += 0.001  # the oldest row is exactly max_dwell_ms old
    f.wake()
    assert target.wait_batches(1) == [([(1, "tail"), (2, "tail")], True)]
    f.finish()
    assert len(target.batches) == 1  # finish() had nothing left


def test_dwell_zero_never_flushes_by_time():
    target, clock = FakeTarget(), Clock()
    f = flusher(target, clock, max_rows=100, dwell_ms=0)
    f.add((1, "x"))
    clock.now += 10**6
    f.wake()
    f.add((2, "x"))
    assert target.batches == []
    f.finish()
    assert target.batches == [([(1, "x"), (2, "x")], False)]


# -- back-pressure ----------------------------------------------------------------------------

def add_in_thread(f, row):
    """Run f.add(row) in a thread; returns (finished event, errors list)."""
    finished, errors = threading.Event(), []

    def run():
        try:
            f.add(row)
        except BaseException as exc:  # reported to the test
            errors.append(exc)
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    return finished, errors


def test_add_that_hands_over_a_batch_while_another_is_written_waits_for_that_write():
    """The rule: the batch handed over waits behind the one being written, and so does its add()."""
    target, clock = FakeTarget(), Clock()
    target.hold()
    f = flusher(target, clock, max_rows=1)
    f.add((1, "a"))          # batch 1: handed over, being written (held)
    target.wait_entered()
    finished, errors = add_in_thread(f, (2, "b"))  # batch 2: handed over; add() must wait
    assert not finished.wait(0.5)  # still waiting (a missing rule would return at once)
    assert len(f._queue) == 2 and target.batches == []
    target.release()
    assert finished.wait(HANG) and errors == []
    f.finish()
    assert [b for b, _ in target.batches] == [[(1, "a")], [(2, "b")]]


def test_rows_below_a_full_batch_never_wait():
    target, clock = FakeTarget(), Clock()
    target.hold()
    f = flusher(target, clock, max_rows=3)
    for k in (1, 2, 3):
        f.add((k, "x"))      # the third fills the batch: handed over, nothing in flight before it
    target.wait_entered()
    f.add((4, "x"))          # buffered behind the write in flight: add() returns at once
    f.add((5, "x"))
    assert len(f.buffer) == 2
    target.release()
    f.finish()
    assert [b for b, _ in target.batches] == [[(1, "x"), (2, "x"), (3, "x")], [(4, "x"), (5, "x")]]


def test_a_waiting_add_raises_the_writes_error_instead_of_waiting_forever():
    target, clock = FakeTarget(), Clock()
    target.hold()
    target.fail = SinkError("write failed for good")
    f = flusher(target, clock, max_rows=1)
    f.add((1, "a"))
    target.wait_entered()
    finished, errors = add_in_thread(f, (2, "b"))
    target.release()
    assert finished.wait(HANG)
    assert errors == [target.fail]
    with pytest.raises(SinkError) as info:
        f.finish()
    assert info.value is target.fail


# -- failure and abort ------------------------------------------------------------------------

def test_a_failed_write_is_reported_once_logged_and_raised_by_the_next_add(caplog):
    target, clock = FakeTarget(), Clock()
    target.fail = SinkError("boom")
    reported = threading.Event()
    seen: list[BaseException] = []

    def on_failure(exc):
        seen.append(exc)
        reported.set()

    f = flusher(target, clock, max_rows=1, on_failure=on_failure)
    with caplog.at_level(logging.ERROR, logger="rtm_lakebase.sink.flusher"):
        f.add((1, "a"))
        assert reported.wait(HANG)
    assert seen[0] is target.fail
    with pytest.raises(SinkError):
        f.add((2, "b"))
    assert any(r.levelno == logging.ERROR for r in caplog.records)
    f.abort()


def test_abort_cancels_the_write_in_flight_and_reports_no_flush_failure(caplog):
    target, clock = FakeTarget(), Clock()
    target.hold()  # the write would wait until cancelled
    seen: list[BaseException] = []
    f = flusher(target, clock, max_rows=2, on_failure=seen.append)
    f.add((1, "a"))
    f.add((2, "b"))
    target.wait_entered()
    f.add((3, "c"))  # buffered behind it: dropped by abort (Spark replays it)
    with caplog.at_level(logging.DEBUG, logger="rtm_lakebase.sink.flusher"):
        assert f.abort() is True
    assert target.cancelled.is_set()
    assert target.batches == [] and seen == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(f.buffer) == 0


def test_abort_with_nothing_in_flight_says_so_and_does_not_cancel():
    target, clock = FakeTarget(), Clock()
    f = flusher(target, clock, max_rows=10)
    f.add((1, "a"))
    assert f.abort() is False
    assert not target.cancelled.is_set() and target.batches == []


def test_finish_writes_the_rest_and_stops_the_thread():
    target, clock = FakeTarget(), Clock()
    f = flusher(target, clock, max_rows=10)
    f.add((1, "a"))
    f.finish()
    assert target.batches == [([(1, "a")], False)]
    assert not f._thread.is_alive()
