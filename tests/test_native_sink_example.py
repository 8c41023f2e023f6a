"""examples/native_lakebase_sink.py: imports, passes the checker, gates the runtime.

The module cannot run here (Databricks' ``postgresql`` streaming source is not
in Apache Spark); what can be checked is checked: every option it sets is in
the sink's documented set and the checker finds nothing in it, the checker's
option rules fire on the wrong forms, and the runtime gate refuses what it
must.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "scripts") not in sys.path:
    sys.path.insert(0, str(REPO / "scripts"))

from examples import native_lakebase_sink as ex
from rtm_lakebase.check.rules import native_sink, python_rules

SOURCE = (REPO / "examples" / "native_lakebase_sink.py").read_text(encoding="utf-8")


def test_example_passes_the_checker():
    assert python_rules(ast.parse(SOURCE), "native_lakebase_sink.py") == []


def test_every_option_the_example_sets_is_documented():
    keys = {node.args[0].value for node in ast.walk(ast.parse(SOURCE))
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "option"
            and node.args and isinstance(node.args[0], ast.Constant)}
    assert keys == {"endpoint", "database", "dbtable", "upsertkey", "batchsize", "batchinterval",
                    "checkpointLocation"}
    assert {k.lower() for k in keys} <= native_sink.DOCUMENTED
    assert set(ex.DOCUMENTED_OPTIONS) == keys


@pytest.mark.parametrize("text,ok", [("100 milliseconds", True), ("1 second", True), ("2 minutes 5 seconds", True),
                                     ("100 ms", False), ("100", False), ("fast", False), ("1s", False)])
def test_batchinterval_units(text, ok):
    assert native_sink.spark_interval_ok(text) is ok


def test_runtime_gate():
    ex.require_runtime((19, 0), "external Postgres", environ={"DATABRICKS_RUNTIME_VERSION": "19.1"})
    with pytest.raises(RuntimeError, match="needs Databricks Runtime 19.0 or later, this cluster runs 18.0"):
        ex.require_runtime((19, 0), "external Postgres", environ={"DATABRICKS_RUNTIME_VERSION": "18.0"})
    with pytest.raises(RuntimeError, match="not a Databricks cluster"):
        ex.require_runtime((18, 0), "the native sink", environ={})
    assert ex.runtime_version({"DATABRICKS_RUNTIME_VERSION": "client.1.2"}) is None


@pytest.mark.spark
@pytest.mark.parametrize("text", ["100 milliseconds", "1 second", "2 minutes 5 seconds", "100 ms", "100", "fast", "1s"])
def test_batchinterval_check_agrees_with_sparks_interval_parser(spark, text):
    """The checker's LBS003 and open-source Spark's own interval parser accept the same strings; "100 ms"
    fails there with INVALID_INTERVAL_FORMAT.INVALID_UNIT. (Databricks' sink itself is not run here.)"""
    jvm = spark.sparkContext._jvm
    utf8 = jvm.org.apache.spark.unsafe.types.UTF8String.fromString(text)
    try:
        jvm.org.apache.spark.sql.catalyst.util.IntervalUtils.stringToInterval(utf8)
        spark_ok, error = True, ""
    except Exception as exc:  # py4j wraps the JVM's SparkIllegalArgumentException
        spark_ok, error = False, str(exc)
    assert native_sink.spark_interval_ok(text) is spark_ok
    if text == "100 ms":
        assert "INVALID_INTERVAL_FORMAT.INVALID_UNIT" in error
