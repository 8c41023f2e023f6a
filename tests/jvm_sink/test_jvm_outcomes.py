"""The JVM sink decides every failure by the shared table (rtm_lakebase/jvm/Outcomes.java reads outcomes.json).

For every rule of ``rtm_lakebase/sink/outcomes.json`` (and for inputs no rule
matches) the Java lookup gives the outcome the Python lookup gives
(``rtm_lakebase.sink.errors.outcome_rule``), so the two sinks cannot drift apart
again; the parity suite (tests/sink_parity) then runs both sinks through real faults.
"""

from __future__ import annotations

import pytest

from rtm_lakebase.sink.errors import outcome_rule, outcome_table

pytestmark = [pytest.mark.spark]


def _inputs():
    """(sqlstate, phase, client, message) per rule, in both phases, plus inputs no rule matches."""
    seen = set()
    for rule in outcome_table()["rules"]:
        code = rule.get("sqlstate")
        states = [code] if code and len(code) == 5 else [f"{code}000", f"{code}P99"] if code else [None]
        messages = [""] + [f"FATAL: something {fragment} here" for fragment in rule.get("message", [])[:2]]
        for state in states:
            for phase in ("connect", "write"):
                for message in messages:
                    case = (state, phase, rule.get("client") if state is None else None, message)
                    if case not in seen:
                        seen.add(case)
                        yield case
    yield from [("XX000", "write", None, ""), ("42P07", "connect", None, ""), (None, "write", None, ""),
                (None, "connect", "connection_lost", "Connection refused"), ("0A000", "write", None, "")]


def test_java_and_python_read_the_same_outcome_for_every_rule(jvm_spark):
    outcomes = jvm_spark.sparkContext._jvm.rtm_lakebase.jvm.Outcomes
    cases = list(_inputs())
    differ = []
    for state, phase, client, message in cases:
        python = outcome_rule(state, phase, client, message)["outcome"]
        java = outcomes.outcomeName(state, phase, client, message)
        if java != python:
            differ.append((state, phase, client, message, python, java))
    assert differ == [], differ
    assert len(cases) > 2 * len(outcome_table()["rules"])

