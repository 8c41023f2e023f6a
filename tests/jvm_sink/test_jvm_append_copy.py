"""mode=append writes through COPY ... FROM STDIN (rtm_lakebase/jvm/PgCopy.java).

What COPY stores equals what the INSERT path stores for text that needs escaping (backslash,
tab, newline, carriage return, quotes, the literal \\N), NULLs, arrays, bytea and timestamps;
a flush with a column COPY would read differently (a double into an integer column) uses INSERT;
a bad row in a COPY is still named by its column; the type matrix (tests/sink/test_type_matrix.py)
runs the JVM sink's append mode through this path too.
"""

from __future__ import annotations

import pytest

from rtm_lakebase.jvm.sink import build_jvm_writer
from tests.jvm_sink.conftest import message_facts
from tests.jvm_sink.jvm_rows import java_list, java_row, write_rows
from tests.sink.helpers import make_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

DDL = "id BIGINT, txt STRING, tags ARRAY<STRING>, blob BINARY, ts TIMESTAMP, f FLOAT, ok BOOLEAN, amount DECIMAL(10,2)"
COLUMNS = {"id": "bigint", "txt": "text", "tags": "text[]", "blob": "bytea", "ts": "timestamptz",
           "f": "double precision", "ok": "boolean", "amount": "numeric(10,2)"}
TRICKY = ["back\\slash", "tab\there", "new\nline", "cr\rhere", 'quote"s', "\\N", "", "ünï €", "end\\"]


def _rows(spark):
    jvm = spark.sparkContext._jvm
    rows = []
    for i, text in enumerate(TRICKY):
        tags = java_list(spark, [text, None, "{x,y}"])
        ts = jvm.java.sql.Timestamp.valueOf(f"2024-03-{i + 1:02d} 12:34:56.123456")
        amount = jvm.java.math.BigDecimal(f"{i}.25")
        rows.append(java_row(spark, DDL, [i, text, tags, bytearray([0, 92, 9, 10, 255, i]), ts,
                                          jvm.java.lang.Float(1.1), i % 2 == 0, amount]))
    rows.append(java_row(spark, DDL, [100, None, None, None, None, None, None, None]))
    return rows


def _dump(conn, table):
    return conn.execute(f'SELECT id, txt, tags, blob, ts, f, ok, amount FROM "{table}" ORDER BY id').fetchall()


def test_copy_stores_what_insert_stores(jvm_spark, pg_dsn, pg_conn, table_name):
    spark = jvm_spark
    by_copy, by_insert = table_name, table_name + "_ins"
    for name in (by_copy, by_insert):
        make_table(pg_conn, name, COLUMNS, key=())
    copy_writer = build_jvm_writer(spark, dsn=pg_dsn, table=by_copy, mode="append")
    insert_writer = build_jvm_writer(spark, dsn=pg_dsn, table=by_insert, mode="append", append_copy=False)
    copy_metrics = write_rows(copy_writer, _rows(spark))
    insert_metrics = write_rows(insert_writer, _rows(spark))
    assert "rows_written=10" in copy_metrics and "copy_flushes=0" not in copy_metrics, copy_metrics
    assert "rows_written=10" in insert_metrics and "copy_flushes=0" in insert_metrics, insert_metrics
    copied = _dump(pg_conn, by_copy)
    assert copied == _dump(pg_conn, by_insert)
    assert [r[1] for r in copied[:-1]] == TRICKY and copied[0][2] == ["back\\slash", None, "{x,y}"]
    assert bytes(copied[1][3]) == bytes([0, 92, 9, 10, 255, 1]) and copied[-1][1:] == (None,) * 7


def test_a_column_copy_would_read_differently_uses_insert(jvm_spark, pg_dsn, pg_conn, table_name):
    spark = jvm_spark
    make_table(pg_conn, table_name, {"id": "bigint", "n": "integer"}, key=())
    writer = build_jvm_writer(spark, dsn=pg_dsn, table=table_name, mode="append")
    # CAST(2.5::float8 AS integer) rounds to 2; COPY would refuse the text "2.5"
    metrics = write_rows(writer, [java_row(spark, "id BIGINT, n DOUBLE", [1, 2.5])])
    assert "copy_flushes=0" in metrics and "rows_written=1" in metrics, metrics
    assert pg_conn.execute(f'SELECT n FROM "{table_name}"').fetchone() == (2,)


def test_a_bad_row_in_a_copy_is_named_by_column_and_nothing_is_written(jvm_spark, pg_dsn, pg_conn, table_name):
    spark = jvm_spark
    make_table(pg_conn, table_name, {"id": "bigint", "day": "date"}, key=())
    writer = build_jvm_writer(spark, dsn=pg_dsn, table=table_name, mode="append")
    rows = [java_row(spark, "id BIGINT, day STRING", [i, "2024-01-02" if i != 3 else "not-a-date"]) for i in range(5)]
    with pytest.raises(Exception) as info:
        write_rows(writer, rows)
    message = str(info.value)
    facts = message_facts(message)
    assert facts["column"] == "day" and facts["sqlstate"] == "22007" and "id=3" in message, message  # no key: its values
    assert pg_conn.execute(f'SELECT count(*) FROM "{table_name}"').fetchone() == (0,)
