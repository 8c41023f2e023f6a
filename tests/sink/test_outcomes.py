"""The outcome table (``rtm_lakebase/sink/outcomes.json``): its shape, every rule both ways, and ``classify``.

Both sinks read the same file; these tests check the Python reading of it. The
parity suite (``tests/sink_parity``) checks that both engines do what it says
against a real Postgres.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from rtm_lakebase.sink.errors import Failure, classify, outcome_rule, outcome_table

TABLE = outcome_table()
RULES = TABLE["rules"]
OUTCOMES = {"retry", "reconnect", "bad_row", "permanent"}


def test_the_file_is_package_data_and_well_formed():
    path = Path(__file__).resolve().parents[2] / "rtm_lakebase" / "sink" / "outcomes.json"
    assert json.loads(path.read_text()) == TABLE
    assert TABLE["default"] in OUTCOMES
    assert set(TABLE["outcomes"]) == OUTCOMES
    for rule in RULES:
        assert set(rule) <= {"sqlstate", "client", "phase", "message", "outcome", "why", "bounded_by_flush_time"}
        assert ("sqlstate" in rule) != ("client" in rule), rule
        assert rule["phase"] in ("connect", "write", "any")
        assert rule["outcome"] in OUTCOMES
        assert rule["why"]
        if "sqlstate" in rule:
            code = rule["sqlstate"]
            assert len(code) in (2, 5) and code.isalnum() and code == code.upper(), code
        else:
            assert rule["client"] in TABLE["clients"]
        assert all(m == m.lower() for m in rule.get("message", ())), rule
        assert not rule.get("bounded_by_flush_time") or rule["outcome"] == "bad_row"


def _matching_failure(rule):
    """(sqlstate, phase, client, message) of a failure that this rule is written for."""
    phase = "connect" if rule["phase"] == "connect" else "write"
    code = rule.get("sqlstate")
    sqlstate = None if code is None else code if len(code) == 5 else code + "999"
    message = rule["message"][0] if "message" in rule else ""
    return sqlstate, phase, rule.get("client"), message


def _rule_id(rule):
    return f"{rule.get('sqlstate') or rule.get('client')}-{rule['phase']}{'-msg' if 'message' in rule else ''}"


@pytest.mark.parametrize("rule", RULES, ids=_rule_id)
def test_every_rule_decides_the_failure_it_is_written_for(rule):
    """No rule is shadowed by an earlier one: its own failure reaches it."""
    assert outcome_rule(*_matching_failure(rule)) is rule


@pytest.mark.parametrize("rule", RULES, ids=_rule_id)
def test_every_rule_leaves_other_failures_alone(rule):
    sqlstate, phase, client, message = _matching_failure(rule)
    if rule["phase"] != "any":  # the other phase
        other = "write" if phase == "connect" else "connect"
        assert outcome_rule(sqlstate, other, client, message) is not rule
    if "message" in rule:  # the same code without the text
        assert outcome_rule(sqlstate, phase, client, "something else") is not rule
    if sqlstate:  # another class; and no SQLSTATE at all
        assert outcome_rule("XX000", phase, None, message) is not rule
        assert outcome_rule(None, phase, None, message) is not rule
        if len(rule["sqlstate"]) == 5:  # a code is exact, not a prefix
            assert outcome_rule(sqlstate[:4] + ("Z" if sqlstate[4] != "Z" else "Y"), phase, None, message) is not rule
    else:  # a SQLSTATE, or another client kind, does not match a client rule
        assert outcome_rule("XX000", phase, client, message) is not rule
        assert outcome_rule(None, phase, "something_else", message) is not rule


def test_unknown_failures_take_the_default():
    assert outcome_rule("XX000", "write")["outcome"] == TABLE["default"] == "permanent"
    assert outcome_rule(None, "write")["outcome"] == "permanent"


@pytest.mark.parametrize("sqlstate, phase, outcome", [
    ("55P03", "write", "bad_row"),     # lock timeout: name the waiting row, do not wait again
    ("57014", "write", "bad_row"),     # statement timeout: name the slow row within the flush's time
    ("54000", "write", "bad_row"),     # program limit: an index row too big
    ("25006", "write", "reconnect"),   # read-only after a fail-over
    ("40003", "write", "reconnect"),   # completion unknown
    ("40P01", "write", "retry"),       # deadlock: same connection
    ("40001", "write", "retry"),
    ("53300", "connect", "reconnect"),  # too many connections: a slot frees up
    ("53300", "write", "permanent"),
    ("28P01", "connect", "permanent"),
    ("28000", "connect", "permanent"),
    ("3D000", "connect", "permanent"),
    ("08004", "connect", "permanent"),  # pgjdbc: the server does not support SSL
    ("08001", "connect", "reconnect"),  # server not reachable (yet)
    ("08006", "write", "reconnect"),
    ("57P01", "write", "reconnect"),
    ("42P01", "write", "permanent"),    # dropped table
    ("22001", "write", "bad_row"),
    ("23502", "write", "bad_row"),
])
def test_the_decided_outcomes_of_the_codes_that_drifted(sqlstate, phase, outcome):
    assert outcome_rule(sqlstate, phase)["outcome"] == outcome


def test_lock_and_statement_timeouts_are_bounded_by_the_flush_time():
    assert outcome_rule("55P03", "write").get("bounded_by_flush_time") is True
    assert outcome_rule("57014", "write").get("bounded_by_flush_time") is True
    assert not outcome_rule("22001", "write").get("bounded_by_flush_time")


@pytest.mark.parametrize("error, connecting, expected", [
    (psycopg.OperationalError("server closed the connection unexpectedly"), False, Failure.CONNECTION),
    (psycopg.InterfaceError("the connection is closed"), False, Failure.CONNECTION),
    (psycopg.errors.AdminShutdown(), False, Failure.CONNECTION),
    (psycopg.errors.ConnectionFailure(), False, Failure.CONNECTION),
    (psycopg.errors.ReadOnlySqlTransaction(), False, Failure.CONNECTION),
    (psycopg.errors.TransactionResolutionUnknown(), False, Failure.CONNECTION),
    (psycopg.errors.DeadlockDetected(), False, Failure.CONFLICT),
    (psycopg.errors.SerializationFailure(), False, Failure.CONFLICT),
    (psycopg.errors.LockNotAvailable(), False, Failure.TIMEOUT),
    (psycopg.errors.QueryCanceled(), False, Failure.TIMEOUT),
    (psycopg.errors.ProgramLimitExceeded(), False, Failure.ROW),
    (psycopg.errors.StringDataRightTruncation(), False, Failure.ROW),
    (psycopg.errors.UniqueViolation(), False, Failure.ROW),
    (psycopg.errors.CardinalityViolation(), False, Failure.ROW),
    (psycopg.errors.DatatypeMismatch(), False, Failure.ROW),
    (psycopg.errors.DiskFull(), False, Failure.PERMANENT),
    (psycopg.errors.OutOfMemory(), False, Failure.PERMANENT),
    (psycopg.errors.UndefinedTable(), False, Failure.PERMANENT),
    (psycopg.errors.InsufficientPrivilege(), False, Failure.PERMANENT),
    (psycopg.errors.TooManyConnections(), False, Failure.PERMANENT),
    (psycopg.errors.TooManyConnections(), True, Failure.CONNECTION),
    (psycopg.errors.InvalidPassword(), True, Failure.PERMANENT),
    (psycopg.errors.InvalidCatalogName(), True, Failure.PERMANENT),
    # libpq reports a refused login without a SQLSTATE: the text decides (psycopg 3.3, Postgres 15 wording)
    (psycopg.OperationalError('connection failed: FATAL:  password authentication failed for user "u"'), True,
     Failure.PERMANENT),
    (psycopg.OperationalError('connection failed: FATAL:  database "nope" does not exist'), True, Failure.PERMANENT),
    (psycopg.OperationalError("connection failed: server does not support SSL, but SSL was required"), True,
     Failure.PERMANENT),
    (psycopg.OperationalError("connection failed: SSL error: certificate verify failed"), True, Failure.PERMANENT),
    (psycopg.OperationalError("connection failed: Connection refused"), True, Failure.CONNECTION),
    (psycopg.OperationalError("connection timeout expired"), True, Failure.CONNECTION),
    (UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogates not allowed"), False, Failure.ROW),
    (psycopg.DataError("cannot dump lists of mixed types"), False, Failure.ROW),
    (RuntimeError("unrelated"), False, Failure.PERMANENT),
])
def test_classify_maps_the_table_to_the_sinks_failures(error, connecting, expected):
    assert classify(error, connecting=connecting) is expected
