"""Every bad value becomes a BadRowError naming the row's key and the column; nothing of its flush is written.

Never a raw Python exception from inside the sink: text Postgres cannot store,
naive and aware datetimes mixed in a column or a version, NaN in a key or a
version, values of a type the column cannot take even when every row has it.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkSettings
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres

UTC = dt.UTC
NAIVE = dt.datetime(2026, 1, 1, 12, 0)
AWARE = dt.datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TYPES = {"id": "bigint", "version": "bigint", "name": "text", "ts": "timestamptz", "day": "date",
         "x": "double precision"}


def writer(dsn, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


def row(i, **values):
    base = {"id": i, "version": 1, "name": f"n{i}", "ts": None, "day": None, "x": None}
    base.update(values)
    return base


def run_expecting_bad_row(dsn, table, rows, **options) -> BadRowError:
    w = writer(dsn, table, **options)
    w.open(0, 0)
    try:
        for r in rows:
            w.process(r)
        w.close(None)
    except BadRowError as exc:
        w.close(exc)
        return exc
    raise AssertionError("no BadRowError")


CASES = {
    "lone surrogate": [row(1), row(7, name="bad \udc80 text"), row(2)],
    "NUL in text": [row(1), row(7, name="nul\x00inside"), row(2)],
    "naive then aware in one flush": [row(1, ts=NAIVE), row(7, ts=AWARE)],
    "aware then naive in one flush": [row(1, ts=AWARE), row(7, ts=NAIVE)],
    "bool in bigint in every row": [row(7, version=True), row(8, version=False)],
    "float in bigint in every row": [row(7, version=1.5), row(8, version=2.5)],
    "str in bigint in every row": [row(7, version="1"), row(8, version="2")],
    "dict in text in every row": [row(7, name={"a": 1}), row(8, name={"b": 2})],
    "datetime in a date column": [row(7, day=NAIVE), row(8, day=NAIVE)],
    "list as key": [row(1), row([7], name="list key")],
}
COLUMN = {"lone surrogate": "name", "NUL in text": "name", "naive then aware in one flush": "ts",
          "aware then naive in one flush": "ts", "bool in bigint in every row": "version",
          "float in bigint in every row": "version", "str in bigint in every row": "version",
          "dict in text in every row": "name", "datetime in a date column": "day", "list as key": "id"}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_value_is_a_bad_row_naming_key_and_column(pg_dsn, pg_conn, table_name, case):
    make_table(pg_conn, table_name, TYPES)
    error = run_expecting_bad_row(pg_dsn, table_name, CASES[case])
    assert error.column == COLUMN[case], str(error)
    key = [7] if case == "list as key" else 7
    assert error.key == {"id": key}, str(error)
    assert f"column {COLUMN[case]}" in str(error)
    assert table_rows(pg_conn, table_name) == []  # nothing of the flush was written


def test_naive_then_aware_across_flushes_is_a_bad_row(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, TYPES)
    error = run_expecting_bad_row(pg_dsn, table_name, [row(1, ts=NAIVE), row(7, ts=AWARE)], max_batch_rows=1)
    assert error.key == {"id": 7} and error.column == "ts"
    assert [r[0] for r in table_rows(pg_conn, table_name)] == [1]  # the first flush was written


@pytest.mark.parametrize("versions, bad_at", [
    ((NAIVE, AWARE), 1),                  # same key: the dedup compares them
    ((AWARE, NAIVE), 1),
    ((1.0, math.nan), 1),                 # a NaN version is a bad row, on a duplicate key...
    ((math.nan, 2.0), 0),
    ((Decimal(1), Decimal("NaN")), 1),
])
def test_version_that_cannot_be_ordered_is_a_bad_row(pg_dsn, pg_conn, table_name, versions, bad_at):
    kind = "timestamptz" if isinstance(versions[0], dt.datetime) else "double precision"
    if isinstance(versions[0], Decimal):
        kind = "numeric"
    make_table(pg_conn, table_name, {"id": "bigint", "version": kind, "name": "text"})
    rows = [{"id": 7, "version": v, "name": f"v{i}"} for i, v in enumerate(versions)]
    error = run_expecting_bad_row(pg_dsn, table_name, rows, version_column="version")
    assert error.key == {"id": 7} and error.column == "version", str(error)
    assert table_rows(pg_conn, table_name) == []


def test_nan_version_alone_and_nan_key_are_bad_rows(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "double precision", "version": "double precision", "name": "text"})
    error = run_expecting_bad_row(pg_dsn, table_name, [{"id": 1.0, "version": 1.0, "name": "a"},
                                                      {"id": 7.0, "version": math.nan, "name": "b"}],
                                  version_column="version")
    assert error.key == {"id": 7.0} and error.column == "version"
    error = run_expecting_bad_row(pg_dsn, table_name, [{"id": math.nan, "version": 1.0, "name": "a"},
                                                      {"id": math.nan, "version": 2.0, "name": "b"}])
    assert error.column == "id" and math.isnan(error.key["id"])
    assert table_rows(pg_conn, table_name) == []


def test_infinite_versions_are_ordered_like_postgres_orders_them(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name, {"id": "bigint", "version": "double precision", "name": "text"})
    for version, name in ((1.0, "one"), (math.inf, "inf"), (5.0, "older than inf")):
        w = writer(pg_dsn, table_name, version_column="version")
        w.open(0, 0)
        w.process({"id": 1, "version": version, "name": name})
        w.close(None)
    assert table_rows(pg_conn, table_name) == [(1, math.inf, "inf")]


# -- property-based: generated values into one typed table ---------------------------------
_value = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6), st.sampled_from(["ok", "\x00", "\udc80", "a\ud800b"]),
    st.datetimes(timezones=st.sampled_from([None, UTC])), st.dates(), st.binary(max_size=4),
    st.decimals(allow_nan=True, allow_infinity=False, places=2),
)
_COLUMNS = {"id": "bigint", "version": "bigint", "name": "text", "ts": "timestamptz", "x": "double precision"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.tuples(_value, _value, _value, _value), min_size=1, max_size=8))
def test_generated_values_are_written_or_named_never_raw(pg_dsn, pg_conn, values):
    table = "t_prop_values"
    pg_conn.execute(f"DROP TABLE IF EXISTS {table}")
    make_table(pg_conn, table, _COLUMNS)
    w = writer(pg_dsn, table, version_column="version")
    w.open(0, 0)
    try:
        for i, (version, name, ts, x) in enumerate(values):
            w.process({"id": i, "version": version, "name": name, "ts": ts, "x": x})
        w.close(None)
    except BadRowError as exc:  # anything else (TypeError, UnicodeEncodeError, ...) fails the test
        w.close(exc)
        assert exc.column in _COLUMNS and exc.key is not None and "id" in exc.key, str(exc)
        assert table_rows(pg_conn, table) == []
    else:
        got = table_rows(pg_conn, table)
        assert len(got) == len(values)
        for (version, name, _ts, x), stored in zip(values, got, strict=True):
            assert stored[1] == version and stored[2] == name  # nothing converted on the way
            x = float(x) if type(x) is int else x
            assert (stored[4] is None and x is None) or stored[4] == x or (math.isnan(stored[4]) and math.isnan(x))
    pg_conn.execute(f"DROP TABLE {table}")


def test_value_checks_name_the_first_bad_value_without_postgres():
    from rtm_lakebase.sink.rows import ValueChecks

    checks = ValueChecks(("id", "v", "t"), ("bigint", "double precision", "text"), ordered=(0, 1))
    assert checks.first_problem([[1, 2], [1.0, 2], ["a", None]]) is None
    assert checks.first_problem([[1, True], [1.0, 2.0], ["a", "b"]])[:2] == (1, 0)
    assert checks.first_problem([[1, 2], [1.0, math.nan], ["a", "b"]])[:2] == (1, 1)
    assert checks.first_problem([[1, 2], [1.0, 2.0], ["a", "b\x00"]])[:2] == (1, 2)
