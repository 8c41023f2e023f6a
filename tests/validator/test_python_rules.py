"""The AST rules on Python source: aliases, multi-line chains, durations, and false positives they must avoid."""

from __future__ import annotations

import textwrap

import pytest

from rtm_lakebase.check.rules.realtime import parse_duration
from skillcheck.codeblocks import check_python_source


def found(code: str) -> list[tuple[str, int]]:
    findings, _ = check_python_source(textwrap.dedent(code), "snippet.py")
    return sorted((f.code, f.line) for f in findings)


def codes(code: str) -> set[str]:
    return {c for c, _ in found(code)}


@pytest.mark.parametrize("text,seconds", [
    ("5 seconds", 5), ("5 second", 5), ("500 milliseconds", 0.5), ("1 minute", 60), ("5s", 5),
    ("interval 10 seconds", 10), ("1 minute 30 seconds", 90), ("2 hours", 7200), ("250ms", 0.25),
    ("4.5 seconds", 4.5),
])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "soon", "5", "5 parsecs", "seconds 5", "5 seconds later"])
def test_parse_duration_rejects(text):
    assert parse_duration(text) is None


def test_alias_chain_reassigned_writer():
    assert codes('''
        q = df.writeStream.foreach(w).outputMode("update")
        q = q.trigger(realTime=True)
        q.start()
    ''') == {"RTM001"}


def test_duration_through_variable_and_multiline_chain():
    assert found('''
        t = "500 milliseconds"
        query = (
            df.writeStream
            .foreach(w)
            .outputMode("update")
            .trigger(realTime=t)
            .start()
        )
    ''') == [("RTM002", 7)]


def test_unparseable_duration_and_jvm_trigger():
    assert codes('df.writeStream.foreach(w).outputMode("update").trigger(realTime="fast").start()') == {"RTM002"}
    assert codes('jvm.org.apache.spark.sql.streaming.Trigger.RealTime("1 second")') == {"RTM002"}
    assert codes('jvm.org.apache.spark.sql.streaming.Trigger.RealTime("10 seconds")') == set()


def test_unknown_duration_variable_is_not_guessed():
    assert codes('''
        from pack_lab.rtm_lab import MIN_REAL_TIME_TRIGGER
        df.writeStream.foreach(w).outputMode("update").trigger(realTime=MIN_REAL_TIME_TRIGGER).start()
    ''') == set()


def test_foreach_batch_defined_before_trigger_alias():
    result = found('''
        w = df.writeStream.foreachBatch(handle)
        w = w.outputMode("update")
        w.trigger(realTime="5 seconds").start()
    ''')
    assert result == [("RTM003", 2)]


def test_micro_batch_queries_are_not_real_time():
    assert codes('''
        @udf("string")
        def up(s):
            return s.upper()

        (df.select(up("name")).dropDuplicatesWithinWatermark(["id"]).join(static, "id")
           .writeStream.foreachBatch(f).outputMode("append").trigger(processingTime="1 second").start())
    ''') == set()


def test_missing_output_mode_defaults_to_append():
    assert codes('df.writeStream.foreach(w).trigger(realTime="5 seconds").start()') == {"RTM004"}
    # No start(): the writer may be finished elsewhere, so nothing is claimed.
    assert codes('writer = df.writeStream.foreach(w).trigger(realTime="5 seconds")') == set()


def test_output_mode_through_variable():
    assert codes('''
        mode = "complete"
        df.writeStream.foreach(w).outputMode(mode).trigger(realTime="5 seconds").start()
    ''') == {"RTM004"}


@pytest.mark.parametrize("udf_def", [
    'up = udf(lambda s: s.upper(), "string")',
    'up = F.udf(lambda s: s.upper(), "string")',
    '@pandas_udf("string")\ndef up(s):\n    return s.str.upper()',
    '@F.udf(returnType="string")\ndef up(s):\n    return s.upper()',
    'up = spark.udf.register("up", lambda s: s.upper())',
])
def test_udf_forms(udf_def):
    code = udf_def + '\nout = df.withColumn("u", up(col("name")))\nout.writeStream.foreach(w).outputMode("update").trigger(realTime="5 seconds").start()\n'
    assert codes(code) == {"RTM006"}


def test_builtin_functions_are_not_udfs():
    assert codes('''
        out = df.withColumn("u", F.upper(F.col("name"))).select(F.expr("id + 1"))
        out.writeStream.foreach(w).outputMode("update").trigger(realTime="5 seconds").start()
    ''') == set()


def test_map_in_arrow_and_session_window_in_sql_text():
    assert codes('df.mapInArrow(fn, schema).writeStream.foreach(w).outputMode("update").trigger(realTime="5 seconds").start()') == {"RTM007"}
    assert codes('''
        agg = df.selectExpr("session_window(ts, '1 minute') AS s").groupBy("s").count()
        agg.writeStream.foreach(w).outputMode("update").trigger(realTime="5 seconds").start()
    ''') == {"RTM008"}


@pytest.mark.parametrize("other,flagged", [
    ("static", True),
    ("broadcast(static)", False),
    ("F.broadcast(static)", False),
    ('static.hint("broadcast")', False),
    ("small", False),  # small = broadcast(static) below
    ("other_stream", True),
])
def test_join_broadcast_forms(other, flagged):
    code = f'''
        static = spark.read.table("dim")
        small = broadcast(static)
        other_stream = source2.dataframe()
        joined = stream.join({other}, "id")
        joined.writeStream.foreach(w).outputMode("update").trigger(realTime="5 seconds").start()
    '''
    assert ("RTM009" in codes(code)) is flagged


SINK_TEMPLATE = '''
class Writer:
    def open(self, partition_id, epoch_id):
        try:
            self.conn = connect()
        except Exception:
            {handler}
        return True
'''


@pytest.mark.parametrize("handler,flagged", [
    ("return False", True),
    ("return None", True),
    ("return", True),
    ("return 0", True),
    ("raise", False),
    ("raise RuntimeError('no connection')", False),
    ("self.conn = None\n            raise", False),
])
def test_sink_open_handlers(handler, flagged):
    assert ("SINK001" in codes(SINK_TEMPLATE.format(handler=handler))) is flagged


def test_sink_rule_ignores_other_methods_and_nested_functions():
    assert codes('''
        class Writer:
            def process(self, row):
                try:
                    send(row)
                except Exception:
                    return False

            def open(self, partition_id, epoch_id):
                def probe():
                    try:
                        ping()
                    except Exception:
                        return False
                self.ok = probe()
                return True
    ''') == set()


@pytest.mark.parametrize("call,flagged", [
    ('cur.execute(f"DELETE FROM {table}")', True),
    ('cur.execute("DELETE FROM %s" % table)', True),
    ('cur.execute("DELETE FROM {}".format(table))', True),
    ('cur.execute("DELETE FROM " + table)', True),
    ('q = f"DELETE FROM {table}"\ncur.execute(q)', True),
    ('q = "DELETE FROM {}".format(table)\nconn.execute(q)', True),
    ('cur.executemany(f"INSERT INTO {t} VALUES (%s)", rows)', True),
    ('cur.copy(f"COPY {t} FROM STDIN")', True),
    ('cur.execute("DELETE FROM t WHERE id = %s", (key,))', False),
    ('cur.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))', False),
    ('q = sql.SQL("COPY {} FROM STDIN").format(sql.Identifier(t))\ncur.copy(q)', False),
    ('cur.execute("SELECT 1 " "FROM t")', False),
    ('cur.execute(f"SELECT 1")', False),  # an f-string without fields builds nothing
    ('print(f"DELETE FROM {table}")', False),
])
def test_sql_building(call, flagged):
    assert ("SQL001" in codes(call)) is flagged


@pytest.mark.parametrize("line,flagged", [
    ('x = a + \\  # note', True),
    ('x = (a +  # note \\', True),
    ('s = "a # b \\\\"', False),
    ('x = a + \\', False),
    ('# just a comment', False),
    ('url = "http://x/#frag" \\', False),
])
def test_continuation(line, flagged):
    assert ("CONT001" in codes(line + "\n    b\n")) is flagged


def test_continuation_inside_triple_quoted_string_is_ignored():
    assert "CONT001" not in codes('doc = """\nline # with hash \\\n"""\n')


def test_syntax_error_reported_with_its_line():
    assert found("x = 1\ndef f(:\n    pass\n") == [("PY001", 2)]


def test_rules_run_on_functions_and_nested_blocks():
    assert codes('''
        def run(spark, df, w):
            if True:
                q = df.writeStream.foreach(w).outputMode("update")
            return q.trigger(realTime="2 seconds").start()
    ''') == {"RTM002"}
