"""Type matrix, both sinks, every mode: a value sent through the sink reads back as a plain INSERT stores it.

One table with every type a user's table may have (char(n) key, varchar(n), text, citext, numeric(p,s),
integer and float types, boolean, date, time, timetz, timestamp, timestamptz, interval, uuid, json,
jsonb, bytea, arrays (2-D too), inet, cidr, an enum, a domain over char(n), a generated column, an
identity column, a column with a default the rows omit). The values come out of Spark (SQL literals,
so each is exactly one Spark value), with three different non-UTC zones in play:

- the Spark session: Asia/Kolkata;
- the executor: America/New_York (Python worker ``TZ``; the JVM's default zone, which pgjdbc also
  sends as the Postgres session's TimeZone);
- the Python sink's Postgres session: Europe/Berlin.

Rows carry a DST gap (2024-03-10 02:30 New York), both sides of a DST overlap (01:30 EDT and EST on
2024-11-03), and dates and instants before 1900 (New York's local mean time) and before 1582.

The expected table is filled by a plain parameterised INSERT (psycopg) of what each Spark value
means; both tables are read back as text in UTC and compared cell by cell. The Python sink runs in a
Spark job (``mapPartitions`` in the New York worker: open/process/close); the JVM sink is driven
through py4j with rows Spark converted under the New York default zone.
"""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.sink import BadRowError, PostgresForeachWriter, SinkSettings
from rtm_lakebase.sink.statements import COLUMNS_QUERY, FOLDS_UNICODE_QUERY

SESSION_TZ, EXECUTOR_TZ, PG_TZ = "Asia/Kolkata", "America/New_York", "Europe/Berlin"
MODES = ("upsert", "insert_ignore", "append")
ROOT = Path(__file__).resolve().parents[2]

UTC = dt.UTC


def _utc(*args) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


#: column → (Postgres type, Spark SQL type of the value sent). Written columns only.
COLUMNS = {
    "k": ("char(8)", "string"),
    "c8": ("char(8)", "string"),
    "vc": ("varchar(10)", "string"),
    "tx": ("text", "string"),
    "ci": ("citext", "string"),
    "num": ("numeric(7,2)", "decimal(9,3)"),
    "i2": ("smallint", "smallint"),
    "i4": ("integer", "int"),
    "i8": ("bigint", "bigint"),
    "f4": ("real", "float"),
    "f8": ("double precision", "double"),
    "b": ("boolean", "boolean"),
    "d": ("date", "date"),
    "tm": ("time", "string"),
    "ttz": ("timetz", "string"),
    "ts": ("timestamp", "timestamp_ntz"),
    "ts_i": ("timestamp", "timestamp"),     # an instant into a column without zone
    "tstz": ("timestamptz", "timestamp"),
    "iv": ("interval", "string"),
    "u": ("uuid", "string"),
    "j": ("json", "string"),
    "jb": ("jsonb", "string"),
    "by": ("bytea", "binary"),
    "ai": ("integer[]", "array<int>"),
    "at": ("text[]", "array<string>"),
    "ai2": ("integer[]", "array<array<int>>"),
    "ip": ("inet", "string"),
    "net": ("cidr", "string"),
    "mo": ("{schema}.mood", "string"),
    "dc": ("{schema}.code8", "string"),
}
#: Columns the rows leave out: Postgres fills them.
FILLED = {"g": "integer GENERATED ALWAYS AS (char_length(tx) + 1) STORED", "ident": "bigint GENERATED ALWAYS AS IDENTITY",
          "df": "text DEFAULT 'filled'"}

#: The rows: column → Spark SQL literal. Keys 'abc', 'axy', 'azz', 'a' differ only after the first
#: character (a cast to `character` cut them all to 'a' before).
ROWS = [
    {"k": "'abc'", "c8": "'hello'", "vc": "'0123456789'", "tx": "'pl\u00e4in \u2603'", "ci": "'MiXeD'",
     "num": "12345.675BD", "i2": "-32768S", "i4": "2147483647", "i8": "-9223372036854775808L", "f4": "1.5F",
     "f8": "0.1D", "b": "true", "d": "DATE '1850-01-01'", "tm": "'13:45:00.123456'", "ttz": "'13:45:00+05:30'",
     "ts": "TIMESTAMP_NTZ '2024-03-10 02:30:00'", "ts_i": "TIMESTAMP '2024-01-15 12:00:00Z'",
     "tstz": "TIMESTAMP '1883-11-18 12:00:00Z'", "iv": "'1 day 02:00:00'",
     "u": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "j": """'{"b": 1,  "a": [1, 2]}'""",
     "jb": """'{"b": 1,  "a": [1, 2]}'""", "by": "X'00FF10'", "ai": "array(1, 2, 3)",
     "at": "array('a', 'b,c', 'q\"uote', NULL)", "ai2": "array(array(1, 2), array(3, 4))",
     "ip": "'192.168.0.1/24'", "net": "'10.0.0.0/8'", "mo": "'sad'", "dc": "'abc'"},
    {"k": "'axy'", "c8": "'a'", "vc": "''", "tx": "''", "ci": "'x'", "num": "-0.005BD", "i2": "0S", "i4": "-1",
     "i8": "0L", "f4": "-0.0F", "f8": "1e300D", "b": "false", "d": "DATE '1200-03-01'", "tm": "'00:00'",
     "ttz": "'23:59:59-08'", "ts": "TIMESTAMP_NTZ '2024-11-03 01:30:00'",
     "ts_i": "TIMESTAMP '2024-11-03 05:30:00Z'", "tstz": "TIMESTAMP '2024-11-03 05:30:00Z'",
     "iv": "'-3 hours'", "u": "'00000000-0000-0000-0000-000000000000'", "j": "'[]'", "jb": "'null'",
     "by": "X''", "ai": "array()", "at": "array()", "ai2": "array(array(5))", "ip": "'::1'",
     "net": "'2001:db8::/32'", "mo": "'ok'", "dc": "'a'"},
    {"k": "'azz'", "c8": "'12345678'", "vc": "'x'", "tx": "'x'", "ci": "'x'", "num": "99999.99BD", "i2": "1S",
     "i4": "1", "i8": "1L", "f4": "3.4028234E38F", "f8": "-1.0E-300D", "b": "true",
     "d": "DATE '2024-02-29'", "tm": "'23:59:59.999999'", "ttz": "'00:00+00'",
     "ts": "TIMESTAMP_NTZ '1850-06-01 12:00:00.000001'", "ts_i": "TIMESTAMP '2024-11-03 06:30:00Z'",
     "tstz": "TIMESTAMP '2024-11-03 06:30:00Z'", "iv": "'1 mon 2 days'",
     "u": "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'", "j": "'1'", "jb": "'[1, \"a\"]'", "by": "X'00'",
     "ai": "array(NULL)", "at": "array('')", "ai2": "array(array(1, NULL), array(3, 4))",
     "ip": "'10.1.2.3'", "net": "'192.168.0.0/16'", "mo": "'sad'", "dc": "'azz     '"},
    {"k": "'a'", **{c: f"CAST(NULL AS {t})" for c, (_, t) in COLUMNS.items() if c != "k"}},
]


def _expected_rows() -> list[dict]:
    """What each Spark value means, as Python values for psycopg (instants aware, wall clocks naive)."""
    ny = ZoneInfo(EXECUTOR_TZ)
    return [
        {"k": "abc", "c8": "hello", "vc": "0123456789", "tx": "pl\u00e4in \u2603", "ci": "MiXeD",
         "num": Decimal("12345.675"), "i2": -32768, "i4": 2147483647, "i8": -9223372036854775808, "f4": 1.5,
         "f8": 0.1, "b": True, "d": dt.date(1850, 1, 1), "tm": "13:45:00.123456", "ttz": "13:45:00+05:30",
         "ts": dt.datetime(2024, 3, 10, 2, 30), "ts_i": _utc(2024, 1, 15, 12), "tstz": _utc(1883, 11, 18, 12),
         "iv": "1 day 02:00:00", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "j": '{"b": 1,  "a": [1, 2]}',
         "jb": '{"b": 1,  "a": [1, 2]}', "by": b"\x00\xff\x10", "ai": [1, 2, 3], "at": ["a", "b,c", 'q"uote', None],
         "ai2": [[1, 2], [3, 4]], "ip": "192.168.0.1/24", "net": "10.0.0.0/8", "mo": "sad", "dc": "abc"},
        {"k": "axy", "c8": "a", "vc": "", "tx": "", "ci": "x", "num": Decimal("-0.005"), "i2": 0, "i4": -1, "i8": 0,
         "f4": -0.0, "f8": 1e300, "b": False, "d": dt.date(1200, 3, 1), "tm": "00:00", "ttz": "23:59:59-08",
         "ts": dt.datetime(2024, 11, 3, 1, 30), "ts_i": _utc(2024, 11, 3, 5, 30), "tstz": _utc(2024, 11, 3, 5, 30),
         "iv": "-3 hours", "u": "00000000-0000-0000-0000-000000000000", "j": "[]", "jb": "null", "by": b"",
         "ai": [], "at": [], "ai2": [[5]], "ip": "::1", "net": "2001:db8::/32", "mo": "ok", "dc": "a"},
        {"k": "azz", "c8": "12345678", "vc": "x", "tx": "x", "ci": "x", "num": Decimal("99999.99"), "i2": 1, "i4": 1,
         "i8": 1, "f4": 3.4028234e38, "f8": -1.0e-300, "b": True, "d": dt.date(2024, 2, 29), "tm": "23:59:59.999999",
         "ttz": "00:00+00", "ts": dt.datetime(1850, 6, 1, 12, 0, 0, 1), "ts_i": _utc(2024, 11, 3, 6, 30),
         "tstz": _utc(2024, 11, 3, 6, 30), "iv": "1 mon 2 days", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
         "j": "1", "jb": '[1, "a"]', "by": b"\x00", "ai": [None], "at": [""], "ai2": [[1, None], [3, 4]],
         "ip": "10.1.2.3", "net": "192.168.0.0/16", "mo": "sad", "dc": "azz     "},
        {"k": "a", **{c: None for c in COLUMNS if c != "k"}},
    ], ny


def _instant_as_wall_clock(rows: list[dict], zone: str) -> list[dict]:
    """ts_i (an instant into `timestamp`): the wall clock the sink's rule gives (see the reference)."""
    out = []
    for row in rows:
        row = dict(row)
        if row["ts_i"] is not None:
            row["ts_i"] = row["ts_i"].astimezone(ZoneInfo(zone)).replace(tzinfo=None)
        out.append(row)
    return out


# -- Postgres side ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def matrix_schema(pg_dsn):
    """A schema holding the enum, the domain over char(8) and citext (skipped from the matrix if absent)."""
    schema = f"tm_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS citext")
            citext = True
        except psycopg.Error:
            citext = False
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TYPE {}.mood AS ENUM ('ok', 'sad')").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE DOMAIN {}.code8 AS char(8) CHECK (VALUE <> 'bad')").format(
            sql.Identifier(schema)))
    yield schema, citext
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _columns(citext: bool) -> dict[str, tuple[str, str]]:
    return {c: v for c, v in COLUMNS.items() if citext or c != "ci"}


def _create(conn, schema: str, citext: bool, name: str) -> None:
    parts = [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t.format(schema=schema) if c != "ci" else "citext"))
             for c, (t, _) in _columns(citext).items()]
    parts += [sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(d)) for c, d in FILLED.items()]
    parts.append(sql.SQL("PRIMARY KEY (k)"))
    conn.execute(sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(name), sql.SQL(", ").join(parts)))


def _plain_insert(conn, name: str, rows: list[dict], citext: bool) -> None:
    cols = list(_columns(citext))
    statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
        sql.Identifier(name), sql.SQL(", ").join(map(sql.Identifier, cols)),
        sql.SQL(", ").join(sql.Placeholder() * len(cols)))
    for row in rows:
        conn.execute(statement, [row[c] for c in cols])


def _read(conn, name: str) -> list[dict]:
    """Every column (the filled ones too) as text, read in UTC."""
    conn.execute("SET TimeZone = 'UTC'")
    cur = conn.execute(sql.SQL("SELECT * FROM {} ORDER BY k").format(sql.Identifier(name)))
    names = [d.name for d in cur.description]
    texts = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY k").format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in names),
        sql.Identifier(name))).fetchall()
    return [dict(zip(names, row, strict=True)) for row in texts]


def _differences(got: list[dict], want: list[dict]) -> list[str]:
    if len(got) != len(want):
        return [f"{len(got)} rows, expected {len(want)}: keys {[r['k'] for r in got]}"]
    return [f"k={w['k']!r} {c}: sink stored {g[c]!r}, a plain INSERT stores {w[c]!r}"
            for g, w in zip(got, want, strict=True) for c in w if c != "ident" and g[c] != w[c]]


# -- Spark side -------------------------------------------------------------------------------------

def _frame(spark, citext: bool, rows=ROWS):
    cols = _columns(citext)
    selects = [", ".join(f"CAST({row[c]} AS {t}) AS `{c}`" for c, (_, t) in cols.items()) for row in rows]
    return spark.sql(" UNION ALL ".join(f"SELECT {s}" for s in selects)).coalesce(1)


def _python_sink_partition(dsn: str, settings: SinkSettings):
    """The Python sink's foreach contract, run inside the executor's Python worker."""
    def run(rows):
        writer = PostgresForeachWriter(dsn, settings)
        writer.open(0, 0)
        error = None
        try:
            for row in rows:
                writer.process(row)
        except Exception as exc:  # reported below, as foreach would re-raise it
            error = exc
        try:
            writer.close(error)
        except Exception as exc:  # flush errors are raised by close()
            error = error or exc
        zone = time.tzname[0]
        if isinstance(error, BadRowError):
            yield ("bad-row", zone, str(error), error.key, error.column)
        elif error is not None:
            yield ("error", zone, f"{type(error).__name__}: {error}", None, None)
        else:
            yield ("ok", zone, "", None, None)
    return run


@pytest.fixture
def zones(spark):
    """Session in Kolkata; Python workers and the JVM default zone in New York; restored afterwards."""
    jvm = spark.sparkContext._jvm
    before_session = spark.conf.get("spark.sql.session.timeZone")
    before_jvm = jvm.java.util.TimeZone.getDefault()
    env = spark.sparkContext.environment
    before_tz = env.get("TZ")
    spark.conf.set("spark.sql.session.timeZone", SESSION_TZ)
    jvm.java.util.TimeZone.setDefault(jvm.java.util.TimeZone.getTimeZone(EXECUTOR_TZ))
    env["TZ"] = EXECUTOR_TZ  # the Python workers' environment (a new worker daemon per environment)
    try:
        yield
    finally:
        spark.conf.set("spark.sql.session.timeZone", before_session)
        jvm.java.util.TimeZone.setDefault(before_jvm)
        if before_tz is None:
            env.pop("TZ", None)
        else:
            env["TZ"] = before_tz


def run_python_sink(spark, pg_dsn: str, target: tuple[str, str], mode: str, citext: bool, rows=ROWS):
    dsn = f"{pg_dsn} options='-c TimeZone={PG_TZ}'"
    settings = SinkSettings(schema=target[0], table=target[1], mode=mode, key_columns=("k",) if mode != "append" else ())
    (result,) = _frame(spark, citext, rows).rdd.mapPartitions(_python_sink_partition(dsn, settings)).collect()
    assert result[1] in ("EST", "EDT"), f"the Python worker ran in {result[1]}, not {EXECUTOR_TZ}"
    return result


def run_jvm_sink(spark, pg_dsn: str, target: tuple[str, str], mode: str, citext: bool, rows=ROWS):
    """open/process/close on the Java writer through py4j; rows converted by Spark under New York."""
    from rtm_lakebase.jvm import build_jvm_writer

    writer = build_jvm_writer(spark, dsn=pg_dsn, schema=target[0], table=target[1], mode=mode,
                              key_columns=("k",) if mode != "append" else ())
    java_rows = _frame(spark, citext, rows)._jdf.collectAsList()
    writer.open(0, 0)
    error = None
    try:
        for row in java_rows:
            writer.process(row)
    except Exception as exc:  # Py4JJavaError
        error = exc
    try:
        writer.close(None if error is None else error.java_exception)
    except Exception as exc:  # flush errors are thrown by close()
        error = error or exc
    if error is None:
        # append goes through COPY (rtm_lakebase/jvm/PgCopy.java): the matrix checks what COPY stores
        assert mode != "append" or "copy_flushes=0" not in writer.metrics(), writer.metrics()
        return ("ok", None, "", None, None)
    java = getattr(error, "java_exception", None)
    if java is not None and java.getClass().getSimpleName() == "BadRowException":
        key = java.getKey()
        return ("bad-row", None, java.getMessage(), {k: key.get(k) for k in key.keySet()}, java.getColumn())
    return ("error", None, str(java.toString() if java is not None else error), None, None)


SINKS = {"python": run_python_sink, "jvm": run_jvm_sink}


def _expected_for(sink: str, citext: bool) -> list[dict]:
    rows, _ = _expected_rows()
    # An instant into `timestamp`: the Python worker hands Spark's TimestampType over as its local wall
    # clock (New York); the JVM sink writes the Spark session's wall clock (Kolkata).
    rows = _instant_as_wall_clock(rows, EXECUTOR_TZ if sink == "python" else SESSION_TZ)
    if not citext:
        rows = [{c: v for c, v in r.items() if c != "ci"} for r in rows]
    return rows


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sink", sorted(SINKS))
def test_every_type_reads_back_as_a_plain_insert_stores_it(spark, zones, pg_dsn, pg_conn, matrix_schema,
                                                           sink, mode, request):
    if sink == "jvm":
        request.getfixturevalue("jvm_spark")
    schema, citext = matrix_schema
    table, expected = f"tm_{sink}_{mode}_{uuid.uuid4().hex[:6]}", f"tm_exp_{uuid.uuid4().hex[:6]}"
    pg_conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    try:
        _create(pg_conn, schema, citext, table)
        _create(pg_conn, schema, citext, expected)
        _plain_insert(pg_conn, expected, _expected_for(sink, citext), citext)
        status = SINKS[sink](spark, pg_dsn, (schema, table), mode, citext)
        assert status[0] == "ok", status
        want = _read(pg_conn, expected)
        assert len(want) == 4  # 'abc', 'axy', 'azz', 'a': char(8) keys stay distinct
        assert not _differences(_read(pg_conn, table), want)
        if mode == "upsert":  # the same rows again: the no-op check must work for json too
            status = SINKS[sink](spark, pg_dsn, (schema, table), mode, citext)
            assert status[0] == "ok", status
            assert not _differences(_read(pg_conn, table), want)
    finally:
        for name in (table, expected):
            pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
        pg_conn.execute("RESET search_path")


BAD_VALUES = [  # (column, Spark literal, what Postgres says): a plain INSERT refuses each the same way
    ("c8", "'123456789'", "value too long for type character(8)"),
    ("vc", "'01234567890'", "value too long for type character varying(10)"),
    ("num", "123456.0BD", "numeric field overflow"),
    ("dc", "'bad'", "violates check constraint"),
    ("dc", "'123456789'", "value too long for type character(8)"),
    ("mo", "'meh'", "invalid input value for enum"),
    ("j", "'{not json'", "invalid input syntax for type json"),
    ("ip", "'300.1.1.1'", "invalid input syntax for type inet"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sink", sorted(SINKS))
def test_a_value_a_plain_insert_refuses_is_a_bad_row_naming_key_and_column(spark, zones, pg_dsn, pg_conn,
                                                                          matrix_schema, sink, mode, request):
    if sink == "jvm":
        request.getfixturevalue("jvm_spark")
    schema, citext = matrix_schema
    table = f"tm_bad_{sink}_{mode}_{uuid.uuid4().hex[:6]}"
    pg_conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    try:
        _create(pg_conn, schema, citext, table)
        for column, literal, reason in BAD_VALUES:
            row = {**ROWS[1], "k": "'bad'", column: literal}
            status = SINKS[sink](spark, pg_dsn, (schema, table), mode, citext, rows=[ROWS[0], row])
            assert status[0] == "bad-row", (column, status)
            assert status[4] == column and reason in status[2], (column, status)
            if mode != "append":
                assert status[3] == {"k": "bad     "} or status[3] == {"k": "bad"}, status
            assert pg_conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0] == 0
    finally:
        pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
        pg_conn.execute("RESET search_path")


@pytest.mark.parametrize("sink", sorted(SINKS))
def test_no_op_check_compares_by_stored_form_not_by_equality(spark, zones, pg_dsn, pg_conn, matrix_schema, sink,
                                                              request):
    # citext 'MiXeD' = 'MIXED' and interval '1 day' = '24 hours': an equality check would skip these updates.
    if sink == "jvm":
        request.getfixturevalue("jvm_spark")
    schema, citext = matrix_schema
    table = f"tm_noop_{sink}_{uuid.uuid4().hex[:6]}"
    pg_conn.execute(sql.SQL("SET search_path = {}, public").format(sql.Identifier(schema)))
    try:
        _create(pg_conn, schema, citext, table)
        assert SINKS[sink](spark, pg_dsn, (schema, table), "upsert", citext, rows=[ROWS[0]])[0] == "ok"
        changed = {**ROWS[0], "iv": "'26 hours'", "j": """'{"b":1,"a":[1,2]}'"""}
        if citext:
            changed["ci"] = "'MIXED'"
        assert SINKS[sink](spark, pg_dsn, (schema, table), "upsert", citext, rows=[changed])[0] == "ok"
        got = _read(pg_conn, table)[0]
        assert got["iv"] == "26:00:00" and got["j"] == '{"b":1,"a":[1,2]}'
        if citext:
            assert got["ci"] == "MIXED"
    finally:
        pg_conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, table)))
        pg_conn.execute("RESET search_path")


def test_both_sinks_run_the_same_catalog_query():
    java = (ROOT / "rtm_lakebase" / "jvm" / "PgColumnTypes.java").read_text()
    block = java.split("// columns-query:start")[1].split("// columns-query:end")[0]
    java_query = "".join(re.findall(r'\+ "((?:[^"\\]|\\.)*)"', block)).replace("\\n", "\n")
    python_query = COLUMNS_QUERY.replace("%(table)s", "?").replace("%(schema)s", "CAST(? AS text)")
    assert java_query.split() == python_query.split()


def test_both_sinks_ask_the_same_case_folding_question():
    java = (ROOT / "rtm_lakebase" / "jvm" / "PgColumnTypes.java").read_text()
    literal = re.search(r'FOLDS_UNICODE_QUERY = "((?:[^"\\]|\\.)*)"', java).group(1)
    assert literal.encode().decode("unicode_escape") == FOLDS_UNICODE_QUERY
