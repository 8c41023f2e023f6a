"""Keys that differ in Spark but are one key in Postgres: ``char(n)`` ignores trailing spaces, ``citext`` case.

Written one row at a time, ``'abc'`` then ``'abc  '`` into a ``char(8)`` key is one row holding the later
value (upsert) or the first (insert_ignore). Both sinks must store what that plain sequence stores — in one
flush, not fail it with "ON CONFLICT DO UPDATE command cannot affect row a second time", and never merge keys
that are distinct in Postgres ('abc' vs 'abd', 'Abc' vs 'Abd').
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.jvm.sink import build_jvm_writer
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings
from tests.jvm_sink.jvm_rows import java_row, write_rows

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

# (key type, rows in arrival order as (key, payload)); rows 1 and 2 of each case are one key to Postgres
CASES = {
    "char8": ("char(8)", [("abc", "first"), ("abc  ", "second"), ("abd", "other"), ("abc ", "third")]),
    "citext": ("citext", [("Abc", "first"), ("ABC", "second"), ("Abd", "other"), ("abc", "third")]),
    # one key or two, as the database's collation folds (ASCII only under "C"): the plain sequence decides
    "citext-accents": ("citext", [("Éa", "first"), ("éA", "second"), ("Éb", "other"), ("ÉA", "third")]),
}


@pytest.fixture(scope="module")
def have_citext(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citext")
            return True
        except psycopg.Error:
            return False


def _plain_sequence(conn, table, key_type, rows, mode):
    """What writing the rows one statement at a time stores: the behaviour both sinks must match."""
    conflict = "DO UPDATE SET payload = EXCLUDED.payload" if mode == "upsert" else "DO NOTHING"
    conn.execute(sql.SQL("CREATE TABLE {} (k {} PRIMARY KEY, payload text)").format(
        sql.Identifier(table), sql.SQL(key_type)))
    for key, payload in rows:
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s) ON CONFLICT (k) " + conflict).format(
            sql.Identifier(table)), (key, payload))
    return conn.execute(sql.SQL("SELECT k::text, payload FROM {} ORDER BY payload").format(
        sql.Identifier(table))).fetchall()


def _python_sink(spark, pg_dsn, table, rows, mode):
    writer = PostgresForeachWriter(pg_dsn, SinkSettings(table=table, key_columns=("k",), mode=mode,
                                                        max_batch_rows=100, max_dwell_ms=60_000))
    frame = spark.createDataFrame(rows, "k string, payload string")
    writer.open(0, 0)
    try:
        for row in frame.collect():  # one writer, one flush: the rows arrive together
            writer.process(row)
    except BaseException as exc:
        writer.close(exc)
        raise
    writer.close(None)


def _jvm_sink(spark, pg_dsn, table, rows, mode):
    writer = build_jvm_writer(spark, dsn=pg_dsn, table=table, mode=mode, key_columns=("k",), max_batch_rows=100,
                              max_dwell_ms=60_000)
    write_rows(writer, [java_row(spark, "k STRING, payload STRING", list(r)) for r in rows])


SINKS = {"python": _python_sink, "jvm": _jvm_sink}


@pytest.mark.parametrize("mode", ["upsert", "insert_ignore"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("sink", sorted(SINKS))
def test_keys_postgres_treats_as_equal_are_one_row_as_a_plain_sequence_stores(spark, pg_dsn, pg_conn, have_citext,
                                                                              sink, case, mode, request):
    if sink == "jvm":
        request.getfixturevalue("jvm_spark")
    key_type, rows = CASES[case]
    if key_type == "citext" and not have_citext:
        pytest.skip("the citext extension is not installed on this server")
    tag = uuid.uuid4().hex[:6]
    table, expected = f"eqk_{sink}_{tag}", f"eqk_exp_{tag}"
    pg_conn.execute(sql.SQL("CREATE TABLE {} (k {} PRIMARY KEY, payload text)").format(
        sql.Identifier(table), sql.SQL(key_type)))
    try:
        want = _plain_sequence(pg_conn, expected, key_type, rows, mode)
        if case != "citext-accents":
            assert len(want) == 2  # the case really holds one merged key and one distinct key
        SINKS[sink](spark, pg_dsn, table, rows, mode)
        got = pg_conn.execute(sql.SQL("SELECT k::text, payload FROM {} ORDER BY payload").format(
            sql.Identifier(table))).fetchall()
        # the stored key text may be either spelling of the merged key; the payload decides which row won
        assert [p for _, p in got] == [p for _, p in want]
        assert sorted(k.rstrip().lower() for k, _ in got) == sorted(k.rstrip().lower() for k, _ in want)
        assert len(got) == len(want)
    finally:
        for name in (table, expected):
            pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture(scope="module", params=["C", "C.UTF-8"])
def collation_dsn(request, pg_dsn):
    """A database whose default collation is ``C`` (lower() folds A-Z only) or ``C.UTF-8`` (folds É too)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"eqk_{request.param.replace('.', '_').replace('-', '').lower()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE {} LC_CTYPE {}")
                         .format(sql.Identifier(name), sql.Literal(request.param), sql.Literal(request.param)))
        except psycopg.Error as exc:
            pytest.skip(f"cannot create a database with collation {request.param} here: {exc}")
    dsn = make_conninfo(**{**conninfo_to_dict(pg_dsn), "dbname": name})
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citext")
            folds = conn.execute("SELECT lower('É') = 'é'").fetchone()[0]
        assert folds == (request.param != "C"), f"{request.param}: lower('É') = 'é' is {folds}"
        yield dsn
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.parametrize("sink", sorted(SINKS))
def test_citext_keys_fold_case_as_the_databases_collation_does(spark, collation_dsn, sink, request):
    # Under "C" 'Éa' and 'éa' are two keys (a Python or Java lower() would merge them and lose a row);
    # under C.UTF-8 they are one. Both sinks must store what the plain sequence stores.
    if sink == "jvm":
        request.getfixturevalue("jvm_spark")
    _, rows = CASES["citext-accents"]
    with psycopg.connect(collation_dsn, autocommit=True) as conn:
        want = _plain_sequence(conn, "eqk_expected", "citext", rows, "upsert")
        assert len(want) == (2 if conn.execute("SELECT lower('É') = 'é'").fetchone()[0] else 3)
        conn.execute("CREATE TABLE eqk_target (k citext PRIMARY KEY, payload text)")
        SINKS[sink](spark, collation_dsn, "eqk_target", rows, "upsert")
        got = conn.execute("SELECT k::text, payload FROM eqk_target ORDER BY payload").fetchall()
        conn.execute("DROP TABLE eqk_target, eqk_expected")
    assert [p for _, p in got] == [p for _, p in want]
