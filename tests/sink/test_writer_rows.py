"""Rows are matched to columns by name on every row (Spark Row, dict, tuple with columns=).

A row in another field order lands in the right columns; a missing or extra
field, or a tuple of the wrong length, raises BadRowError naming the row's key
and the column. Property-based: Hypothesis generates row shapes and orders.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import Row

from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkSettings
from tests.sink.helpers import make_table, table_rows

pytestmark = pytest.mark.postgres

COLUMNS = ("id", "version", "name")


def writer(dsn, table, **options):
    options.setdefault("max_dwell_ms", 0)
    return PostgresForeachWriter(dsn, SinkSettings(table=table, **options))


def named_row(kind: str, fields: dict):
    """The same fields as a Spark Row built by keyword, a Row class, or a dict, in the dict's order."""
    if kind == "row":
        return Row(**fields)
    if kind == "row_class":
        return Row(*fields.keys())(*fields.values())
    return dict(fields)


def test_rows_in_changing_field_order_land_in_the_right_columns(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    rows = [Row(id=1, version=1, name="a"),          # the first row fixes the columns
            Row(name="b", id=2, version=1),          # then other orders
            Row(version=1, name="c", id=3),
            {"name": "d", "version": 1, "id": 4},
            Row("name", "id", "version")("e", 5, 1)]
    w = writer(pg_dsn, table_name)
    w.open(0, 0)
    for row in rows:
        w.process(row)
    w.close(None)
    assert table_rows(pg_conn, table_name) == [(1, 1, "a"), (2, 1, "b"), (3, 1, "c"), (4, 1, "d"), (5, 1, "e")]


@pytest.mark.parametrize("columns, row, column", [
    (None, Row(id=7, name="x"), "version"),                              # a Row missing a field
    (None, {"id": 7, "name": "x"}, "version"),                           # a dict missing a field
    (None, Row(id=7, version=1, name="x", extra=5), "extra"),            # a field the first row had not
    (None, {"id": 7, "version": 1, "name": "x", "extra": 5}, "extra"),
    (COLUMNS, Row(name="x", id=7), "version"),                           # columns= given, field missing
    (COLUMNS, (7, 1), "name"),                                           # a tuple too short
])
def test_missing_or_extra_field_is_a_bad_row_naming_key_and_column(pg_dsn, pg_conn, table_name,
                                                                   columns, row, column):
    make_table(pg_conn, table_name)
    first = (1, 1, "ok") if columns else Row(id=1, version=1, name="ok")
    w = writer(pg_dsn, table_name, columns=columns)
    w.open(0, 0)
    w.process(first)
    with pytest.raises(BadRowError) as info:
        w.process(row)
    w.close(None)  # the good row is still written: a rejected row never reaches the buffer
    assert info.value.key == {"id": 7} and info.value.column == column
    assert "id=7" in str(info.value) and f"column {column}" in str(info.value)
    assert table_rows(pg_conn, table_name) == [(1, 1, "ok")]


def test_tuple_too_long_is_a_bad_row(pg_dsn, pg_conn, table_name):
    make_table(pg_conn, table_name)
    w = writer(pg_dsn, table_name, columns=COLUMNS)
    w.open(0, 0)
    with pytest.raises(BadRowError, match=r"has 4 values for 3 columns") as info:
        w.process((7, 1, "x", "surplus"))
    w.close(info.value)
    assert info.value.key == {"id": 7}
    assert table_rows(pg_conn, table_name) == []


# -- property-based: any field order, any named shape, any subset of missing/extra fields --
_shapes = st.sampled_from(["row", "row_class", "dict"])
_row_spec = st.tuples(
    st.integers(0, 10_000),                        # id
    st.integers(-2**62, 2**62),                    # version
    st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12),
    st.permutations(list(COLUMNS)),                 # field order
    _shapes,
    st.sampled_from(["ok", "ok", "ok", "missing", "extra"]),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(_row_spec, min_size=1, max_size=30, unique_by=lambda s: s[0]))
def test_generated_rows_land_by_name_or_are_named_as_bad(pg_dsn, pg_conn, specs):
    table = "t_prop_rows"
    pg_conn.execute(f"DROP TABLE IF EXISTS {table}")
    make_table(pg_conn, table, {"id": "bigint", "version": "bigint", "name": "text"})
    w = writer(pg_dsn, table, max_batch_rows=7)
    w.open(0, 0)
    w.process(Row(id=-1, version=0, name="first"))
    expected = [(-1, 0, "first")]
    for ident, version, name, order, shape, variant in specs:
        values = {"id": ident, "version": version, "name": name}
        fields = {c: values[c] for c in order}
        if variant == "missing":
            fields.pop(next(c for c in order if c != "id"))
        elif variant == "extra":
            fields["surplus"] = 1
        row = named_row(shape, fields)
        if variant == "ok":
            w.process(row)
            expected.append((ident, version, name))
            continue
        with pytest.raises(BadRowError) as info:
            w.process(row)
        assert info.value.key == {"id": ident}
        assert info.value.column in (set(COLUMNS) - set(fields)) | {"surplus"}
    w.close(None)
    assert table_rows(pg_conn, table) == sorted(expected)
    pg_conn.execute(f"DROP TABLE {table}")
