"""Names longer than Postgres keeps, and invalid UTF-8 in a Spark string: both sinks.

- Postgres cuts identifiers to 63 bytes (at a character boundary); a plain INSERT naming the long
  table or column reaches the cut one. Both sinks resolve names the same way, and refuse two fields
  that become one column.
- Invalid UTF-8 cannot be detected at either sink: Spark turns the bytes into U+FFFD when it makes
  the row a Java string, before any ForeachWriter (JVM or Python) sees it. Spark's own
  ``is_valid_utf8``/``validate_utf8`` on the column, upstream of the sink, is the guard.
"""

from __future__ import annotations

import uuid

import pytest
from psycopg import sql
from pyspark.errors import PySparkException
from pyspark.sql import Row

from rtm_lakebase.sink import PostgresForeachWriter, SinkError, SinkSettings
from rtm_lakebase.sink.statements import pg_name

LONG_TABLE_TAIL = "_" + "t" * 60 + "\u00e9\u00e9"   # over 63 bytes; the cut falls inside a two-byte character
LONG_COLUMN = "c" * 62 + "\u00e9tail"           # 62 + 2 + 4 bytes: Postgres keeps the 62 c's


def test_pg_name_cuts_as_postgres_does(pg_conn):
    for name in ("short", "x" * 63, "x" * 64, LONG_COLUMN, "\u00e9" * 40, "\u2603" * 30):
        # An identifier in SQL text is cut the way a name is (truncate_identifier, 63 bytes, whole characters).
        created = pg_conn.execute(sql.SQL("SELECT 1 AS {}").format(sql.Identifier(name))).description[0].name
        assert pg_name(name) == created == pg_conn.execute(
            sql.SQL("SELECT {}::name::text").format(sql.Literal(name))).fetchone()[0], name


def _long_table(pg_conn) -> str:
    table = f"n_{uuid.uuid4().hex[:8]}{LONG_TABLE_TAIL}"
    assert len(table.encode()) > 63
    pg_conn.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, {} text)").format(
        sql.Identifier(table), sql.Identifier(LONG_COLUMN)))
    return table


@pytest.mark.parametrize("mode", ["upsert", "append"])
def test_python_sink_reaches_a_table_and_column_named_past_63_bytes(pg_dsn, pg_conn, mode):
    table = _long_table(pg_conn)
    try:
        writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table, schema="public", mode=mode,
                                                            key_columns=("id",) if mode != "append" else ()))
        writer.open(0, 0)
        writer.process({"id": 1, LONG_COLUMN: "long names"})
        writer.close(None)
        assert pg_conn.execute(sql.SQL("SELECT id, {} FROM {}").format(
            sql.Identifier(LONG_COLUMN), sql.Identifier(table))).fetchall() == [(1, "long names")]
    finally:
        pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def test_python_sink_refuses_two_fields_that_are_one_column(pg_dsn, pg_conn):
    table = _long_table(pg_conn)
    try:
        writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table, schema="public"))
        writer.open(0, 0)
        with pytest.raises(SinkError) as info:
            writer.process({"id": 1, LONG_COLUMN: "a", LONG_COLUMN + "2": "b"})
        assert LONG_COLUMN in str(info.value) and LONG_COLUMN + "2" in str(info.value)  # both fields named
        writer.close(info.value)
    finally:
        pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def test_jvm_sink_reaches_a_table_and_column_named_past_63_bytes(jvm_spark, pg_dsn, pg_conn):
    from rtm_lakebase.jvm import build_jvm_writer

    table = _long_table(pg_conn)
    try:
        writer = build_jvm_writer(jvm_spark, dsn=pg_dsn, table=table)
        frame = jvm_spark.createDataFrame([Row(id=1, **{LONG_COLUMN: "long names"})])
        writer.open(0, 0)
        for row in frame._jdf.collectAsList():
            writer.process(row)
        writer.close(None)
        assert pg_conn.execute(sql.SQL("SELECT id, {} FROM {}").format(
            sql.Identifier(LONG_COLUMN), sql.Identifier(table))).fetchall() == [(1, "long names")]
    finally:
        pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def test_invalid_utf8_reaches_both_sinks_already_replaced_so_the_guard_is_upstream(jvm_spark):
    frame = jvm_spark.sql("SELECT CAST(X'61FF62' AS STRING) AS s, is_valid_utf8(CAST(X'61FF62' AS STRING)) AS ok")
    # What a Python foreach's process() gets, and what the JVM writer's process() gets: valid text with U+FFFD.
    assert frame.collect()[0].s == "a\ufffdb"
    assert frame._jdf.collectAsList().get(0).getString(0) == "a\ufffdb"
    assert "a\ufffdb".encode("utf-8") == b"a\xef\xbf\xbdb"  # what either sink would store: nothing to detect
    # Spark still sees the original bytes: check them before the sink.
    assert frame.collect()[0].ok is False
    with pytest.raises(PySparkException, match="INVALID_UTF8_STRING"):
        jvm_spark.sql("SELECT validate_utf8(CAST(X'61FF62' AS STRING))").collect()


@pytest.mark.parametrize("mode, kept", [("upsert", "second"), ("insert_ignore", "first")])
def test_keys_postgres_holds_equal_are_one_row_as_a_plain_insert_leaves_them(pg_dsn, pg_conn, table_name, mode,
                                                                              kept):
    # char(n) ignores trailing spaces and citext case: 'abc' and 'abc  ' (or 'Key' and 'KEY') are one key.
    pg_conn.execute("CREATE EXTENSION IF NOT EXISTS citext")
    pg_conn.execute(sql.SQL("CREATE TABLE {} (k char(8), c citext, v text, PRIMARY KEY (k, c))").format(
        sql.Identifier(table_name)))
    writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table_name, mode=mode))
    writer.open(0, 0)
    writer.process({"k": "abc", "c": "Key", "v": "first"})
    writer.process({"k": "abc  ", "c": "KEY", "v": "second"})
    writer.process({"k": "abd", "c": "key", "v": "other"})
    writer.close(None)
    rows = pg_conn.execute(sql.SQL("SELECT k, v FROM {} ORDER BY k").format(sql.Identifier(table_name))).fetchall()
    assert rows == [("abc     ", kept), ("abd     ", "other")]
