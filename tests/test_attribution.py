"""Ad attribution (``rtm_lakebase/attribution.py``) against the plain-Python rules, in and out of Spark.

- Without Spark: the processor driven by PySpark's ``TwsTester`` (in-memory
  state and timers) is compared row for row with
  ``pack_lab/attribution_reference.py``, fed both one row per call (as
  Databricks real-time mode calls ``handleInputRows``) and a batch per call
  (as micro-batch does).
- With Spark (micro-batch, the lab's sources): a scenario run, a many-key run
  from the seeded generator and a restart from the checkpoint, each compared
  with the reference row for row and, through the pack's Postgres writer,
  with the table; the state data source reader shows the state empty once
  the timers have fired.
- In real-time mode the same query dies in open-source 4.3.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from pack_lab.attribution_events import AttributionSpec, generate, split_streams
from pack_lab.attribution_reference import ReferenceAttribution, expected_output
from rtm_lakebase import attribution as A


def _sorted(rows):
    return sorted((dict(r) for r in rows), key=A.output_key)


def _as_input(event):
    """A generator event as the processor sees it after ``attribute``'s union."""
    from pyspark.sql import Row

    request = event["stream"] == "request"
    return Row(transaction_id=event["transaction_id"], kind=event["stream"],
               event_id=event["request_id"] if request else event["ack_id"],
               ad_id=event.get("ad_id"), event_ms=event["event_ms"])


def run_tws_tester(events, window_ms, per_row=True, batch_ms=500):
    """Drive the processor with ``TwsTester``, the clock following ``arrival_ms``.

    ``per_row``: one ``handleInputRows`` call per event, timers checked before
    each (Databricks real-time mode). Otherwise events are grouped into
    batches of ``batch_ms`` and each key gets one call per batch with all its
    rows, timers firing after the batch's input (micro-batch order).
    """
    from pyspark.sql.streaming.tws_tester import TwsTester

    tester = TwsTester(A.AttributionProcessor(window_ms), timeMode="ProcessingTime")
    out, now = [], 0
    if per_row:
        for event in sorted(events, key=lambda e: e["arrival_ms"]):
            if event["arrival_ms"] + 1 > now:  # TwsTester's clock starts at 0 and must move forward
                now = event["arrival_ms"] + 1
                out += tester.setProcessingTime(now)
            out += tester.test(event["transaction_id"], [_as_input(event)])
    else:
        batches: dict[int, list] = {}
        for event in events:
            batches.setdefault(event["arrival_ms"] // batch_ms, []).append(event)
        for index in sorted(batches):
            now = (index + 1) * batch_ms  # the batch runs after its events arrived
            by_key: dict[str, list] = {}
            for event in batches[index]:
                by_key.setdefault(event["transaction_id"], []).append(_as_input(event))
            for key, rows in by_key.items():
                tester._currentProcessingTimeMs = now  # the batch's clock, for handleInputRows
                out += tester.test(key, rows)
            out += tester._handleExpiredTimers()
    out += tester.setProcessingTime(now + 10 * window_ms)
    return [r.asDict() for r in out], tester


# ---------------------------------------------------------------------------
# Generator and reference, no Spark
# ---------------------------------------------------------------------------

def test_generator_is_seeded_and_knobs_change_the_mix():
    spec = AttributionSpec(transactions=2000, seed=7)
    assert generate(spec) == generate(spec)
    assert generate(spec) != generate(AttributionSpec(transactions=2000, seed=8))
    clean = generate(AttributionSpec(transactions=500, out_of_order_pct=0, missing_request_pct=0,
                                     missing_ack_pct=0, duplicate_ack_pct=0, late_pct=0, seed=1))
    assert Counter(e["stream"] for e in clean) == {"request": 500, "ack": 500}
    assert Counter(r["outcome"] for r in expected_output(clean, 6000)) == {"matched": 500}
    events = generate(spec)
    streams = Counter(e["stream"] for e in events)
    # ~5 % of requests missing, ~10 % of the rest without an ack, ~10 % of acks sent twice
    assert 1800 < streams["request"] < 1960
    acks_sent = len({e["ack_id"] for e in events if e["stream"] == "ack"})
    assert streams["ack"] - acks_sent > 100
    assert sum(e["late"] for e in events) > 40
    first_by_tx: dict[str, dict] = {}
    for e in events:
        first_by_tx.setdefault(e["transaction_id"], e)
    out_of_order = sum(1 for e in first_by_tx.values() if e["stream"] == "ack")
    assert out_of_order > 100  # 10 % acks first, plus the transactions without a request
    assert [e["arrival_ms"] for e in events] == sorted(e["arrival_ms"] for e in events)
    requests, acks = split_streams(events)
    assert set(requests[0]) == {"transaction_id", "request_id", "ad_id", "event_ms"}
    assert set(acks[0]) == {"transaction_id", "ack_id", "event_ms"}


def test_generator_timing_keeps_late_events_out_of_the_window():
    spec = AttributionSpec(transactions=1000, late_pct=20, seed=3)
    by_tx: dict[str, list] = {}
    for e in generate(spec):
        by_tx.setdefault(e["transaction_id"], []).append(e)
    for events in by_tx.values():
        start = events[0]["arrival_ms"]
        for e in events:
            gap = e["arrival_ms"] - start
            if e["late"] and events[0] is not e and not events[0]["late"]:
                assert gap >= spec.window_ms + spec.late_margin_ms
            elif not e["late"]:
                assert gap <= spec.max_spread_ms


@pytest.mark.parametrize("knob", ["out_of_order_pct", "missing_request_pct", "missing_ack_pct",
                                  "duplicate_ack_pct", "late_pct"])
@pytest.mark.parametrize("value", [-1, 101])
def test_generator_rejects_percentages_outside_0_100(knob, value):
    with pytest.raises(ValueError, match=knob):
        AttributionSpec(**{knob: value})


def test_generator_rejects_a_window_shorter_than_the_on_time_spread():
    with pytest.raises(ValueError, match="window_ms"):
        AttributionSpec(window_ms=500, max_ack_delay_ms=400)


def test_reference_rules_on_a_hand_example():
    ref = ReferenceAttribution(window_ms=1000)
    req = {"transaction_id": "t", "request_id": "r", "ad_id": "ad", "event_ms": 100}
    assert ref.on_ack({"transaction_id": "t", "ack_id": "a1", "event_ms": 130}, now_ms=0) == []
    matched = ref.on_request(req, now_ms=10)
    assert [(r["ack_id"], r["outcome"], r["latency_ms"]) for r in matched] == [("a1", "matched", 30)]
    assert ref.on_ack({"transaction_id": "t", "ack_id": "a1", "event_ms": 130}, now_ms=20) == []
    assert [r["ack_id"] for r in ref.on_ack(
        {"transaction_id": "t", "ack_id": "a2", "event_ms": 150}, now_ms=30)] == ["a2"]
    assert ref.on_request(dict(req, request_id="r2"), now_ms=40) == []  # the first request stands
    assert ref.advance(999) == [] and ref.open_windows() == 1
    assert ref.advance(1000) == [] and ref.open_windows() == 0  # all matched: nothing to report
    # A window with a request and no ack, then one with an ack and no request.
    ref.on_request(req, now_ms=2000)
    late_ack = ref.on_ack({"transaction_id": "t", "ack_id": "a9", "event_ms": 999}, now_ms=3000)
    assert [(r["outcome"], r["request_id"], r["ack_id"]) for r in late_ack] == [
        ("unmatched_request", "r", "")]
    assert [(r["outcome"], r["request_id"], r["ack_id"], r["ack_ms"]) for r in ref.advance(4000)] == [
        ("unmatched_ack", "", "a9", 999)]
    with pytest.raises(ValueError, match="backwards"):
        ref.advance(10)


# ---------------------------------------------------------------------------
# The processor against the reference, no Spark (PySpark's TwsTester)
# ---------------------------------------------------------------------------

def _events(*specs):
    """(arrival_ms, kind, transaction_id, event_id, event_ms) tuples as generator events."""
    out = []
    for arrival, kind, tid, eid, ms in specs:
        if kind == "request":
            out.append({"stream": "request", "transaction_id": tid, "request_id": eid,
                        "ad_id": "ad-" + tid, "event_ms": ms, "arrival_ms": arrival, "late": False})
        else:
            out.append({"stream": "ack", "transaction_id": tid, "ack_id": eid, "event_ms": ms,
                        "arrival_ms": arrival, "late": False})
    return out


W = 1000
SCENARIOS = {
    "out_of_order": (_events((0, "ack", "t", "a", 150), (200, "request", "t", "r", 100)),
                     [("t", "r", "a", "matched", 50)]),
    "ack_without_request": (_events((0, "ack", "t", "a", 150)),
                            [("t", "", "a", "unmatched_ack", None)]),
    "duplicate_acks": (_events((0, "request", "t", "r", 100), (10, "ack", "t", "a", 170),
                               (20, "ack", "t", "a", 170), (900, "ack", "t", "a", 170)),
                       [("t", "r", "a", "matched", 70)]),
    "request_without_ack": (_events((0, "request", "t", "r", 100)),
                            [("t", "r", "", "unmatched_request", None)]),
    "ack_after_window": (_events((0, "request", "t", "r", 100), (W + 5, "ack", "t", "a", 120)),
                         [("t", "r", "", "unmatched_request", None),
                          ("t", "", "a", "unmatched_ack", None)]),
    "two_acks": (_events((0, "request", "t", "r", 100), (10, "ack", "t", "a1", 110),
                         (20, "ack", "t", "a2", 125)),
                 [("t", "r", "a1", "matched", 10), ("t", "r", "a2", "matched", 25)]),
}


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-batch"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_processor_scenarios(scenario, per_row):
    events, want = SCENARIOS[scenario]
    out, tester = run_tws_tester(events, W, per_row=per_row, batch_ms=100)
    got = sorted((r["transaction_id"], r["request_id"], r["ack_id"], r["outcome"], r["latency_ms"])
                 for r in out)
    assert got == sorted(want)
    assert _sorted(out) == _sorted(expected_output(events, W))
    # Every window closed: nothing left in state or timers.
    assert tester.peekValueState("request", "t") is None
    assert tester.peekListState("acks", "t") == []
    assert tester.peekValueState("deadline", "t") is None
    assert list(tester.handle._timers.getAllKeysWithTimers()) == []


@pytest.mark.parametrize("per_row", [True, False], ids=["per-row", "per-batch"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_processor_matches_reference_on_generated_streams(seed, per_row):
    spec = AttributionSpec(transactions=400, rate_per_second=200, out_of_order_pct=20,
                           missing_request_pct=10, missing_ack_pct=10, duplicate_ack_pct=20,
                           late_pct=10, window_ms=2000, late_margin_ms=500, seed=seed)
    events = generate(spec)
    out, tester = run_tws_tester(events, spec.window_ms, per_row=per_row, batch_ms=100)
    want = expected_output(events, spec.window_ms)
    assert _sorted(out) == _sorted(want)
    assert len({A.output_key(r) for r in out}) == len(out)  # no pair twice
    assert {r["outcome"] for r in out} == {"matched", "unmatched_request", "unmatched_ack"}
    assert list(tester.handle._timers.getAllKeysWithTimers()) == []


def test_processor_closes_an_overdue_window_before_a_late_row():
    """Micro-batch runs a batch's input before its timers: a row arriving after the
    window's end must not join the old window even though the timer has not fired yet."""
    from pyspark.sql.streaming.tws_tester import TwsTester

    tester = TwsTester(A.AttributionProcessor(W), timeMode="ProcessingTime")
    request, ack = _events((0, "request", "t", "r", 100), (0, "ack", "t", "a", 150))
    tester.setProcessingTime(1)
    assert tester.test("t", [_as_input(request)]) == []
    tester._currentProcessingTimeMs = W + 50  # the next batch, timers not yet run
    out = [r.asDict() for r in tester.test("t", [_as_input(ack)])]
    assert [(r["outcome"], r["ack_id"]) for r in out] == [("unmatched_request", "")]
    # The old timer was deleted; the new window has its own.
    assert list(tester.handle._timers.listTimers("t")) == [2 * W + 50]


def test_ttl_backstop_is_longer_than_the_window():
    assert A.AttributionProcessor(60_000).ttl_ms == 240_000
    assert A.AttributionProcessor(60_000, ttl_ms=90_000).ttl_ms == 90_000
