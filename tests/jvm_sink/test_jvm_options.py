"""The JVM sink's options speak SinkSettings' vocabulary (rtm_lakebase/jvm/SinkSettings.java).

SinkSettings' names, lower-cased as Spark reads options, are the options; the older
names (the native sink's upsertkey, batchsize, batchinterval, ...) still work and are
reported as deprecated; ``table`` is read as SQL reads a table name (schema.table,
quoted parts exact), as the Python writer reads it.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.spark]

URL = "jdbc:postgresql://127.0.0.1:5432/db"


def _writer(spark, **options):
    jmap = spark.sparkContext._jvm.java.util.HashMap()
    jmap.put("url", URL)
    for key, value in options.items():
        jmap.put(key, value)
    return spark.sparkContext._jvm.rtm_lakebase.jvm.PostgresForeachWriter(jmap)


def _refused(spark, **options) -> str:
    """The message of the IllegalArgumentException the constructor throws (PySpark converts it)."""
    with pytest.raises(Exception) as info:  # PySpark's IllegalArgumentException or Py4JJavaError
        _writer(spark, **options)
    java = getattr(info.value, "java_exception", None)
    return str(java.getMessage()) if java is not None else str(info.value)


def test_sink_settings_names_are_the_options(jvm_spark):
    writer = _writer(jvm_spark, table="Sales.Events", KEY_COLUMNS="id, \"Odd,Name\"", max_batch_rows="50",
                     max_dwell_ms="5", version_column="v", skip_unchanged="false", max_retries="2",
                     backoff_initial_ms="10", backoff_max_ms="20", connection_max_age_s="60", append_copy="true")
    text = writer.toString()
    assert 'table="sales"."events"' in text  # unquoted parts fold to lower case, as SQL reads them
    assert "key_columns=[id, Odd,Name]" in text and "max_batch_rows=50" in text and "max_dwell_ms=5" in text
    assert list(writer.deprecatedOptions()) == []


def test_quoted_table_parts_are_exact_and_schema_makes_table_one_name(jvm_spark):
    assert 'table="Sales"."Order.Lines"' in _writer(jvm_spark, table='"Sales"."Order.Lines"').toString()
    assert 'table="s"."a.b"' in _writer(jvm_spark, table="a.b", schema="s").toString()
    assert 'table="events"' in _writer(jvm_spark, table="events").toString()


@pytest.mark.parametrize("table, match", [
    ("a.b.c", "at most schema.table"),
    ('"open', "not closed"),
    ("my table", "quote a name"),
])
def test_a_table_sql_cannot_read_is_refused_on_the_driver(jvm_spark, table, match):
    assert match in _refused(jvm_spark, table=table)


def test_older_names_still_work_and_are_reported_deprecated(jvm_spark):
    writer = _writer(jvm_spark, dbtable="s.t", upsertkey="id", batchsize="7", batchinterval="2 seconds",
                     versioncolumn="v", maxretries="1", passwordprovider="com.example.P")
    text = writer.toString()
    assert 'table="s"."t"' in text and "key_columns=[id]" in text and "max_batch_rows=7" in text
    assert "max_dwell_ms=2000" in text and "version_column=v" in text and "password_provider=com.example.P" in text
    assert sorted(writer.deprecatedOptions()) == sorted(
        ["dbtable", "upsertkey", "batchsize", "batchinterval", "versioncolumn", "maxretries", "passwordprovider"])


def test_a_name_and_its_older_name_together_are_refused(jvm_spark):
    assert "give key_columns or its older name upsertkey, not both" in _refused(
        jvm_spark, table="t", key_columns="id", upsertkey="id")


def test_an_unknown_option_lists_the_names(jvm_spark):
    message = _refused(jvm_spark, table="t", batch_size="5")
    assert "unknown option(s) [batch_size]" in message and "max_batch_rows" in message


def test_max_dwell_ms_zero_means_no_time_based_flush_as_in_python(jvm_spark):
    assert "max_dwell_ms=0" in _writer(jvm_spark, table="t", max_dwell_ms="0").toString()
    assert "max_dwell_ms" in _refused(jvm_spark, table="t", max_dwell_ms="-1")
