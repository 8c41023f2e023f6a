"""Ad attribution (``examples/ad_attribution.py``) against the plain-Python rules, in and out of Spark.

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

from examples import ad_attribution as A
from pack_lab.attribution_events import AttributionSpec, generate, split_streams
from pack_lab.attribution_reference import ReferenceAttribution, expected_output
from pack_lab.oracles import output_key


def _sorted(rows):
    return sorted((dict(r) for r in rows), key=output_key)


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
    assert len({output_key(r) for r in out}) == len(out)  # no pair twice
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


# ---------------------------------------------------------------------------
# Real Spark queries (micro-batch), file sink + Postgres, state reader
# ---------------------------------------------------------------------------

#: Long enough that two deliveries a few batches apart stay in one window on a loaded machine.
SPARK_WINDOW_MS = 45_000
TRIGGER = "1 second"


def _not_warm_up(row):
    return row["transaction_id"] != "warm-up"


def _table_rows(conn, table):
    from psycopg import sql

    cur = conn.execute(sql.SQL("SELECT transaction_id, request_id, ack_id, outcome, ad_id, request_ms,"
                               " ack_ms, latency_ms FROM {}").format(sql.Identifier(table)))
    names = [c.name for c in cur.description]
    return [dict(zip(names, values, strict=True)) for values in cur.fetchall()]


def _drop(conn, table):
    from psycopg import sql

    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def _start(spark, requests, acks, window_ms, writer, checkpoint):
    return A.start_attribution_micro_batch(requests.dataframe(), acks.dataframe(), writer,
                                           checkpoint, window_ms, trigger=TRIGGER)


def _send(requests, acks, events):
    reqs, acks_ = split_streams(events)
    if reqs:
        requests.add(reqs)
    if acks_:
        acks.add(acks_)
    return len(events)


@pytest.fixture(scope="module")
def scenario_run(spark, pg_dsn, tmp_path_factory):
    """One micro-batch query over hand-made transactions, one per scenario, in three deliveries.

    1. acks first ("ooo", "noreq"), complete and partial transactions;
    2. in a later batch: the "ooo" request and another copy of the "dup" ack;
    3. after every window has closed: the "late" transaction's ack.
    """
    import psycopg

    from pack_lab import attribution_lab as lab
    from pack_lab.file_sink import JsonLinesForeachWriter

    base = tmp_path_factory.mktemp("attribution")
    out, checkpoint, table = str(base / "out"), str(base / "checkpoint"), "attr_scenarios"
    first = _events((0, "ack", "ooo", "ooo-a", 1_150), (0, "ack", "noreq", "noreq-a", 1_100),
                    (0, "request", "dup", "dup-r", 1_000), (0, "ack", "dup", "dup-a", 1_090),
                    (0, "ack", "dup", "dup-a", 1_090), (0, "request", "noack", "noack-r", 1_000),
                    (0, "request", "late", "late-r", 1_000), (0, "request", "two", "two-r", 1_000),
                    (0, "ack", "two", "two-a1", 1_010), (0, "ack", "two", "two-a2", 1_040))
    second = _events((1_000, "request", "ooo", "ooo-r", 1_000), (1_000, "ack", "dup", "dup-a", 1_090))
    third = _events((SPARK_WINDOW_MS + 5_000, "ack", "late", "late-a", 1_200))
    expected = expected_output(first + second + third, SPARK_WINDOW_MS)

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        _drop(conn, table)
        A.create_attribution_table(conn, table)
        requests, acks = lab.sources(spark)
        writer = lab.TeeWriter(JsonLinesForeachWriter(out), A.attribution_writer(pg_dsn, table))
        query = _start(spark, requests, acks, SPARK_WINDOW_MS, writer, checkpoint)
        try:
            lab.warm_up(requests, acks, out, query)
            earlier = len(lab.input_batch_times(query))
            sent = 2 + _send(requests, acks, first)
            lab.wait_until(lambda: lab.input_rows(query) >= sent, query, 60, "first delivery")
            sent += _send(requests, acks, second)
            lab.wait_until(lambda: lab.input_rows(query) >= sent, query, 60, "second delivery")
            times = lab.input_batch_times(query)
            gap_ms = times[-1] - times[earlier]
            assert gap_ms < SPARK_WINDOW_MS, (  # else both would rightly be reported unmatched
                f"the machine is too slow for this test: the second delivery's batch started "
                f"{gap_ms} ms after the first's (window {SPARK_WINDOW_MS} ms)")
            before_late = len(expected_output(first + second, SPARK_WINDOW_MS))
            lab.wait_for_output(out, query, before_late, keep=_not_warm_up)
            sent += _send(requests, acks, third)
            lab.wait_for_output(out, query, len(expected), keep=_not_warm_up)
            lab.wait_until(lambda: not any(lab.state_rows(spark, checkpoint).values()), query, 60,
                           "every window closed")
            batch = query.lastProgress["batchId"]  # recentProgress keeps only the last 100 batches
            lab.wait_until(lambda: query.lastProgress["batchId"] >= batch + 2, query, 90, "two more batches")
            operator = query.lastProgress["stateOperators"][0]["operatorName"]
        finally:
            query.stop()
        from pack_lab.file_sink import read_rows

        yield {"rows": [r for r in read_rows(out) if _not_warm_up(r)], "expected": expected,
               "table": [r for r in _table_rows(conn, table) if _not_warm_up(r)],
               "state": lab.state_rows(spark, checkpoint), "operator": operator}
        _drop(conn, table)


def _outcomes(rows, tid):
    return sorted((r["request_id"], r["ack_id"], r["outcome"], r["latency_ms"])
                  for r in rows if r["transaction_id"] == tid)


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
class TestScenarioRun:
    def test_out_of_order_ack_in_an_earlier_batch_is_matched(self, scenario_run):
        assert _outcomes(scenario_run["rows"], "ooo") == [("ooo-r", "ooo-a", "matched", 150)]

    def test_ack_with_no_request_is_reported_when_the_window_ends(self, scenario_run):
        assert _outcomes(scenario_run["rows"], "noreq") == [("", "noreq-a", "unmatched_ack", None)]

    def test_duplicate_acks_give_one_pair(self, scenario_run):
        assert _outcomes(scenario_run["rows"], "dup") == [("dup-r", "dup-a", "matched", 90)]

    def test_request_with_no_ack_is_reported_when_the_window_ends(self, scenario_run):
        assert _outcomes(scenario_run["rows"], "noack") == [("noack-r", "", "unmatched_request", None)]

    def test_ack_after_the_window_opens_a_new_one(self, scenario_run):
        assert _outcomes(scenario_run["rows"], "late") == [
            ("", "late-a", "unmatched_ack", None), ("late-r", "", "unmatched_request", None)]

    def test_spark_output_equals_the_reference_row_for_row(self, scenario_run):
        assert _sorted(scenario_run["rows"]) == _sorted(scenario_run["expected"])

    def test_postgres_table_equals_the_reference(self, scenario_run):
        assert _sorted(scenario_run["table"]) == _sorted(scenario_run["expected"])

    def test_state_is_empty_after_the_timers_fire(self, scenario_run):
        assert scenario_run["state"] == {"request": 0, "acks": 0, "deadline": 0, "timers": 0}

    def test_query_runs_the_python_operator(self, scenario_run):
        # PySpark's transformWithState plans TransformWithStateInPySparkExec, not the JVM operator.
        assert scenario_run["operator"] == "transformWithStateInPySparkExec"


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_many_keys_match_the_reference(spark, pg_dsn, pg_conn, table_name, tmp_path):
    """600 generated transactions with every fault switched on; Spark, Postgres and the rules agree."""
    from pack_lab import attribution_lab as lab
    from pack_lab.attribution_events import feed
    from pack_lab.file_sink import JsonLinesForeachWriter

    spec = AttributionSpec(transactions=600, rate_per_second=150, out_of_order_pct=20,
                           missing_request_pct=5, missing_ack_pct=10, duplicate_ack_pct=15,
                           late_pct=5, window_ms=20_000, late_margin_ms=5_000, seed=11)
    events = generate(spec)
    on_time = [e for e in events if not e["late"]]
    late = [e for e in events if e["late"]]
    expected = expected_output(events, spec.window_ms)
    assert len(late) > 10 and len({e["transaction_id"] for e in events}) == 600

    A.create_attribution_table(pg_conn, table_name)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    requests, acks = lab.sources(spark)
    writer = lab.TeeWriter(JsonLinesForeachWriter(out), A.attribution_writer(pg_dsn, table_name))
    query = _start(spark, requests, acks, spec.window_ms, writer, checkpoint)
    try:
        lab.warm_up(requests, acks, out, query)
        feed(on_time, requests, acks)
        # Late events go in only once every on-time window has closed and reported.
        lab.wait_for_output(out, query, len(expected_output(on_time, spec.window_ms)),
                            keep=_not_warm_up)
        feed(late, requests, acks)
        lab.wait_for_output(out, query, len(expected), keep=_not_warm_up)
        batch = query.lastProgress["batchId"]  # recentProgress keeps only the last 100 batches
        lab.wait_until(lambda: query.lastProgress["batchId"] >= batch + 2, query, 90, "two more batches")
    finally:
        query.stop()
    from pack_lab.file_sink import read_rows

    rows = [r for r in read_rows(out) if _not_warm_up(r)]
    assert Counter(r["outcome"] for r in rows) == Counter(r["outcome"] for r in expected)
    assert _sorted(rows) == _sorted(expected)
    assert _sorted(r for r in _table_rows(pg_conn, table_name) if _not_warm_up(r)) == _sorted(expected)


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_restart_from_the_checkpoint_loses_and_doubles_no_pair(spark, pg_dsn, pg_conn, table_name,
                                                               tmp_path):
    """Stop the query while windows hold half-matched transactions; restart it on the same
    checkpoint; the other halves arrive after the restart and still match.

    If the state were lost, the halves would come out as ``unmatched_*`` rows; if a
    batch replayed, the table's pair key absorbs the second write.
    """
    from pack_lab import attribution_lab as lab
    from pack_lab.file_sink import JsonLinesForeachWriter, read_rows

    window_ms = 45_000  # the restart must fit inside the window
    before = []
    after = []
    for i in range(40):
        tid = f"rs-{i:03d}"
        req = (0, "request", tid, f"{tid}-r", 1_000 + i)
        ack = (0, "ack", tid, f"{tid}-a", 1_100 + i)
        if i < 10:  # complete before the restart; a copy of the ack comes again after it
            before += _events(req, ack)
            after += _events(ack)
        elif i < 25:  # request before, ack after
            before += _events(req)
            after += _events(ack)
        else:  # ack before (out of order), request after
            before += _events(ack)
            after += _events(req)
    for e in after:
        e["arrival_ms"] = 1
    expected = expected_output(before + after, window_ms)
    assert Counter(r["outcome"] for r in expected) == {"matched": 40}

    A.create_attribution_table(pg_conn, table_name)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    requests, acks = lab.sources(spark)

    def start():
        writer = lab.TeeWriter(JsonLinesForeachWriter(out), A.attribution_writer(pg_dsn, table_name))
        return _start(spark, requests, acks, window_ms, writer, checkpoint)

    query = start()
    try:
        lab.warm_up(requests, acks, out, query)
        sent = 2 + _send(requests, acks, before)
        lab.wait_for_output(out, query, 10, keep=_not_warm_up)
        lab.wait_until(lambda: lab.input_rows(query) >= sent, query, 60, "rows before the restart")
        stopped_at = time.monotonic()
    finally:
        query.stop()
    open_windows = lab.state_rows(spark, checkpoint)["deadline"]
    assert open_windows == 41  # 40 transactions and the warm-up, all still open

    query = start()
    try:
        _send(requests, acks, after)
        restart_s = time.monotonic() - stopped_at
        lab.wait_for_output(out, query, len(expected), keep=_not_warm_up)
        lab.wait_until(lambda: not any(lab.state_rows(spark, checkpoint).values()), query,
                       window_ms / 1000 + 60, "every window closed")
        batch = query.lastProgress["batchId"]  # recentProgress keeps only the last 100 batches
        lab.wait_until(lambda: query.lastProgress["batchId"] >= batch + 2, query, 90, "two more batches")
    finally:
        query.stop()
    assert restart_s < window_ms / 1000 / 2, f"restart took {restart_s:.0f} s: windows may have closed"
    table = _sorted(r for r in _table_rows(pg_conn, table_name) if _not_warm_up(r))
    assert table == _sorted(expected)  # every pair once; no unmatched row from lost state
    emitted = Counter(output_key(r) for r in read_rows(out) if _not_warm_up(r))
    assert set(emitted) == {output_key(r) for r in expected}


# ---------------------------------------------------------------------------
# Real-time mode in open-source 4.3
# ---------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.slow
def test_attribution_query_dies_in_real_time_mode(spark, tmp_path, checkpoint):
    """``start_attribution_real_time`` in open-source 4.3: accepted by start(), then the query
    dies while planning its first long batch, emitting nothing."""
    from pack_lab import attribution_lab as lab
    from pack_lab.file_sink import JsonLinesForeachWriter, read_rows

    requests, acks = lab.sources(spark)
    query = A.start_attribution_real_time(requests.dataframe(), acks.dataframe(),
                                          JsonLinesForeachWriter(tmp_path / "out"), checkpoint,
                                          window_ms=10_000, trigger="5 seconds")
    try:
        _send(requests, acks, SCENARIOS["two_acks"][0])
        deadline = time.monotonic() + 120
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
        alive, error = query.isActive, query.exception()
    finally:
        query.stop()
    assert not alive, "PySpark transformWithState kept running in real-time mode"
    assert "STDS_FAILED_TO_READ_OPERATOR_METADATA" in str(error)
    assert read_rows(tmp_path / "out") == []


@pytest.mark.slow
def test_jvm_transform_with_state_runs_in_real_time_mode_only_with_a_jvm_processor(tmp_path):
    """The JVM operator is reachable from Python only through py4j with a compiled Java processor.

    ``pack_lab/attribution_jvm_probe.py`` compiles a Java ``StatefulProcessor``, starts a
    session with it on the class path (a child process: the class must be there when the
    JVM starts), and drives the Java Dataset API through ``df._jdf`` into a Python foreach
    sink with ``trigger(realTime=...)``. The PySpark API cannot do this: it always plans
    ``transformWithStateInPySparkExec`` (``TestScenarioRun.test_query_runs_the_python_operator``).
    """
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-m", "pack_lab.attribution_jvm_probe"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=400)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the probe (exit {done.returncode}): {done.stderr[-2000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], result
    assert done.returncode == 0
    assert result["real_time_scan"] and "isPipelined=true" in result["plan"]  # real-time, not micro-batch
    assert result["operator"] == ["TransformWithState"]  # the JVM operator, not ...InPySpark
    assert result["rows"] == ["a:1", "a:2", "b:1"]  # state kept per key across rows
