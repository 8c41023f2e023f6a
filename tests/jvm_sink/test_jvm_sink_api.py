"""rtm_lakebase.jvm.sink without a query: DSN → JDBC URL, option checks, clear errors for what is missing."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from rtm_lakebase.jvm import sink as jvm_sink
from rtm_lakebase.jvm.sink import (
    JvmSinkUnavailable,
    _format_key_list,
    build_jvm_writer,
    jdbc_url,
    jvm_sink_jars,
    start_jvm_sink_query,
)
from rtm_lakebase.postgres.connection import ConnectionSettings


def test_jdbc_url_keeps_server_tls_and_timeouts_and_never_the_password():
    url = jdbc_url("postgresql://appuser:S3cr3t-pw@ep-x.databricks.com:5432/databricks_postgres?connect_timeout=7")
    assert url.startswith("jdbc:postgresql://ep-x.databricks.com:5432/databricks_postgres?")
    assert "sslmode=require" in url and "connectTimeout=7" in url and "tcpKeepAlive=true" in url
    assert "S3cr3t-pw" not in url and "appuser" not in url
    local = jdbc_url("host=127.0.0.1 port=6543 dbname=my%db user=u")
    assert local.startswith("jdbc:postgresql://127.0.0.1:6543/my%25db?") and "sslmode=disable" in local


def test_jdbc_url_brackets_ipv6_and_lists_several_hosts():
    assert jdbc_url("host=::1 port=5 dbname=d").startswith("jdbc:postgresql://[::1]:5/d?")
    assert jdbc_url("host=a,b port=5 dbname=d").startswith("jdbc:postgresql://a:5,b:5/d?")


def test_jdbc_url_takes_what_the_dsn_leaves_out_from_the_libpq_environment(monkeypatch):
    for name in ("PGHOSTADDR", "PGSERVICE", "PGSSLMODE", "PGCONNECT_TIMEOUT", "PGUSER", "PGPASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGHOST", "db.example.com")
    monkeypatch.setenv("PGPORT", "6000")
    monkeypatch.setenv("PGDATABASE", "appdb")
    url = jdbc_url("user=u")
    assert url.startswith("jdbc:postgresql://db.example.com:6000/appdb?") and "sslmode=require" in url
    assert jdbc_url("host=a,b port=1,2 dbname=d").startswith("jdbc:postgresql://a:1,b:2/d?")


def test_jdbc_url_refuses_what_the_jdbc_driver_cannot_do():
    with pytest.raises(ValueError, match="Unix-socket"):
        jdbc_url("host=/var/run/postgresql dbname=d")
    with pytest.raises(ValueError, match="hostaddr"):
        jdbc_url("host=db.example.com hostaddr=10.0.0.1 dbname=d")
    with pytest.raises(ValueError, match="'target_session_attrs'"):
        jdbc_url("host=h dbname=d target_session_attrs=read-write")
    assert "options=-c%20statement_timeout%3D5000" in jdbc_url("host=h dbname=d options='-c statement_timeout=5000'")


@pytest.mark.parametrize("names, text", [
    ("id", "id"),
    (["a", "b"], "a,b"),
    (["a,b", 'q"x', " pad"], '"a,b","q""x"," pad"'),
])
def test_upsertkey_is_the_native_sinks_comma_list_with_quoted_hostile_names(names, text):
    assert _format_key_list(names) == text


@pytest.mark.parametrize("bad", [[], [""], [1]])
def test_upsertkey_refuses_empty_or_non_string_names(bad):
    with pytest.raises(ValueError, match="key_columns"):
        _format_key_list(bad)


def test_missing_jar_is_named_with_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setenv("RTM_JVM_SINK_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(JvmSinkUnavailable, match=r"not built .*nope\.jar.*build_jvm_sink\.sh"):
        jvm_sink_jars()


def test_stale_jar_is_refused_until_rebuilt(monkeypatch, tmp_path):
    jar = tmp_path / "build" / "sink.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"PK")
    source = tmp_path / "PostgresForeachWriter.java"
    source.write_text("class A {}")
    monkeypatch.delenv("RTM_JVM_SINK_JAR", raising=False)
    monkeypatch.setattr(jvm_sink, "DEFAULT_JAR", jar)
    monkeypatch.setattr(jvm_sink, "SOURCE_FILE", source)
    outcomes = tmp_path / "outcomes.json"  # the outcome table is in the jar, so it counts too
    outcomes.write_text("{}")
    monkeypatch.setattr(jvm_sink, "OUTCOMES_FILE", outcomes)
    monkeypatch.setattr(jvm_sink, "SYSTEM_DRIVER", tmp_path / "postgresql.jar")
    monkeypatch.setattr(jvm_sink, "CACHED_DRIVER", tmp_path / "no-cache" / "postgresql-42.7.14.jar")
    (tmp_path / "postgresql.jar").write_bytes(b"PK")
    monkeypatch.delenv("PG_JDBC_JAR", raising=False)
    jar.with_suffix(".sha256").write_text(hashlib.sha256(b"class B {}").hexdigest())
    with pytest.raises(JvmSinkUnavailable, match="older than PostgresForeachWriter.java"):
        jvm_sink_jars()
    jar.with_suffix(".sha256").write_text(hashlib.sha256(source.read_bytes()).hexdigest())
    with pytest.raises(JvmSinkUnavailable, match="older than"):
        jvm_sink_jars()
    jar.with_suffix(".sha256").write_text(hashlib.sha256(source.read_bytes() + b"{}").hexdigest())
    assert jvm_sink_jars() == [str(jar), str(tmp_path / "postgresql.jar")]


def test_missing_driver_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setattr(jvm_sink, "_writer_jar", lambda: tmp_path / "sink.jar")
    monkeypatch.delenv("PG_JDBC_JAR", raising=False)
    monkeypatch.setattr(jvm_sink, "SYSTEM_DRIVER", tmp_path / "absent.jar")
    monkeypatch.setattr(jvm_sink, "CACHED_DRIVER", tmp_path / "no-cache" / "postgresql-42.7.14.jar")
    with pytest.raises(JvmSinkUnavailable, match="libpostgresql-jdbc-java.*spark.jars.packages=org.postgresql"):
        jvm_sink_jars()
    monkeypatch.setenv("PG_JDBC_JAR", str(tmp_path / "gone.jar"))
    with pytest.raises(JvmSinkUnavailable, match="PG_JDBC_JAR=.*gone.jar is not a file"):
        jvm_sink_jars()


class _Package:
    """Stands in for py4j's view of a JVM package: every attribute is another package."""

    def __getattr__(self, name):
        return _Package()


def _fake_spark(jvm):
    return SimpleNamespace(sparkContext=SimpleNamespace(_jvm=jvm))


def test_class_not_on_the_classpath_is_named(monkeypatch):
    with pytest.raises(JvmSinkUnavailable, match="rtm_lakebase.jvm.PostgresForeachWriter is not on the session's "
                                                 "classpath.*spark.jars"):
        build_jvm_writer(_fake_spark(_Package()), dsn="host=h dbname=d", table="t")


def test_py4j_blocked_as_in_standard_access_mode_is_named():
    from py4j.protocol import Py4JError

    class Blocked:
        def __getattr__(self, name):
            raise Py4JError("py4j.security.Py4JSecurityException: Constructor public "
                            "rtm_lakebase.jvm.PostgresForeachWriter(java.util.Map) is not whitelisted.")

    with pytest.raises(JvmSinkUnavailable, match="blocked.*standard access mode.*format\\('postgresql'\\)"):
        build_jvm_writer(_fake_spark(Blocked()), dsn="host=h dbname=d", table="t")


def test_spark_connect_dataframe_is_refused_with_the_reason():
    class ConnectFrame:
        @property
        def _jdf(self):
            raise AttributeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] Attribute `_jdf` is not supported in Spark Connect")

    with pytest.raises(JvmSinkUnavailable, match="classic Spark session with py4j.*Spark Connect"):
        start_jvm_sink_query(ConnectFrame(), dsn="host=h dbname=d", table="t", checkpoint_location="/tmp/x")


@pytest.mark.parametrize("kwargs, match", [
    ({"mode": "merge"}, "mode must be one of"),
    ({"max_batch_rows": 0}, "max_batch_rows"),
    ({"max_dwell_ms": -1}, "max_dwell_ms"),  # 0 is allowed: no time-based flushes, as in the Python writer
    ({"max_dwell_ms": 1.5}, "max_dwell_ms"),
    ({"mode": "append", "version_column": "v"}, "version_column"),
    ({"mode": "append", "key_columns": ("id",)}, "key_columns"),
    ({"table": ""}, "table"),
    ({"table": "a.b.c"}, "table"),
    ({"key_columns": "id"}, "key_columns"),
    ({"connection_max_age_s": -1}, "connection_max_age_s"),
])
def test_bad_settings_fail_before_touching_the_jvm(kwargs, match):
    options = {"dsn": "host=h dbname=d", "table": "t", **kwargs}
    with pytest.raises(ValueError, match=match):
        build_jvm_writer(_fake_spark(_Package()), **options)


def test_python_password_provider_is_refused():
    settings = ConnectionSettings(host="h", password_provider=lambda: "token")
    with pytest.raises(ValueError, match="password_provider"):
        build_jvm_writer(_fake_spark(_Package()), dsn=settings, table="t")


def test_trigger_must_be_one_keyword():
    with pytest.raises(ValueError, match="exactly one entry"):
        start_jvm_sink_query(object(), dsn="host=h dbname=d", table="t", checkpoint_location="/tmp/x",
                             trigger={"realTime": "5 seconds", "processingTime": "0 seconds"})


@pytest.mark.parametrize("table, schema, dbtable, jschema", [
    ("events", None, "events", None),
    ("sales.events", None, "events", "sales"),
    ("Sales.Events", None, "events", "sales"),               # unquoted: folded as SQL folds it
    ('"My.Schema"."T"', None, "T", "My.Schema"),             # quoted: exact, dots and all
    ('"Events"', None, '"Events"', None),                    # exact name without a schema: sent quoted
    ('"a.b"', None, '"a.b"', None),
    ('a"b', "s", 'a"b', "s"),                                # schema given: table is one exact name
])
def test_table_is_read_as_schema_dot_table_and_sent_parsed(table, schema, dbtable, jschema):
    from rtm_lakebase.jvm.sink import jvm_options
    from rtm_lakebase.sink import SinkSettings

    options = jvm_options(SinkSettings(table=table, schema=schema))
    assert options["table"] == dbtable
    assert options.get("schema") == jschema


def test_every_knob_travels_under_its_jvm_option():
    from rtm_lakebase.jvm.sink import JVM_OPTIONS, jvm_options
    from rtm_lakebase.sink import SinkSettings

    options = jvm_options(SinkSettings(table="s.t", key_columns=("a", "b,c"), version_column="v",
                                       skip_unchanged=False, max_batch_rows=7, max_dwell_ms=9, max_retries=2,
                                       backoff_initial_ms=3, backoff_max_ms=4, connection_max_age_s=5))
    assert options == {"table": "t", "schema": "s", "mode": "upsert", "key_columns": 'a,"b,c"',
                       "version_column": "v", "skip_unchanged": "false", "max_batch_rows": "7",
                       "max_dwell_ms": "9", "max_retries": "2", "backoff_initial_ms": "3",
                       "backoff_max_ms": "4", "connection_max_age_s": "5"}
    assert set(options) == set(JVM_OPTIONS.values())


@pytest.mark.parametrize("old, value, new", [
    ("upsertkey", "id", ("key_columns", ("id",))),
    ("batchsize", 7, ("max_batch_rows", 7)),
    ("batchinterval_ms", 9, ("max_dwell_ms", 9)),
])
def test_old_names_still_work_with_a_warning(monkeypatch, old, value, new):
    seen = {}
    monkeypatch.setattr(jvm_sink, "jvm_options", lambda s: seen.setdefault("settings", s) and {})
    with pytest.warns(FutureWarning, match=f"{old}=.*{new[0]}="), pytest.raises(JvmSinkUnavailable):
        build_jvm_writer(_fake_spark(_Package()), dsn="host=h dbname=d", table="t", **{old: value})
    assert getattr(seen["settings"], new[0]) == new[1]


def test_old_and_new_name_together_are_refused():
    with pytest.raises(TypeError, match="not both"):
        build_jvm_writer(_fake_spark(_Package()), dsn="host=h dbname=d", table="t", key_columns=("a",),
                         upsertkey="b")
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        build_jvm_writer(_fake_spark(_Package()), dsn="host=h dbname=d", table="t", batch_size=3)


def test_the_pinned_pgjdbc_from_maven_central_is_the_default_driver(monkeypatch, tmp_path):
    """Lookup order: $PG_JDBC_JAR, then the pinned, checksummed pgjdbc in .cache/jars/pgjdbc/, then Debian's."""
    from pack_lab import maven_jars

    monkeypatch.delenv("PG_JDBC_JAR", raising=False)
    assert jvm_sink.PG_JDBC_VERSION == maven_jars.PGJDBC_VERSION
    assert jvm_sink.CACHED_DRIVER.parent == maven_jars.set_dir("pgjdbc")
    cached = tmp_path / "pgjdbc" / "postgresql-42.7.14.jar"
    cached.parent.mkdir()
    cached.write_bytes(b"PK")
    monkeypatch.setattr(jvm_sink, "CACHED_DRIVER", cached)
    monkeypatch.setattr(jvm_sink, "SYSTEM_DRIVER", tmp_path / "debian.jar")
    (tmp_path / "debian.jar").write_bytes(b"PK")
    assert jvm_sink._driver_jar() == tmp_path / "debian.jar"  # not verified by the fetch: not used
    (cached.parent / ".verified").write_text("{}")
    assert jvm_sink._driver_jar() == cached
    monkeypatch.setenv("PG_JDBC_JAR", str(tmp_path / "debian.jar"))
    assert jvm_sink._driver_jar() == tmp_path / "debian.jar"


def test_an_unreadable_cached_driver_falls_back_to_the_next_place(monkeypatch, tmp_path):
    # Another user's 0700 cache folder (the eval sandbox's view of the set-up's pgjdbc) is "absent", not an error.
    from rtm_lakebase.jvm import build

    cached = tmp_path / "pgjdbc" / "postgresql-42.7.14.jar"
    cached.parent.mkdir()
    cached.write_bytes(b"PK")
    (cached.parent / ".verified").write_text("{}")
    monkeypatch.delenv("PG_JDBC_JAR", raising=False)
    monkeypatch.setattr(jvm_sink, "CACHED_DRIVER", cached)
    monkeypatch.setattr(jvm_sink, "SYSTEM_DRIVER", tmp_path / "debian.jar")
    (tmp_path / "debian.jar").write_bytes(b"PK")
    assert jvm_sink._driver_jar() == cached
    real_access = build.os.access
    monkeypatch.setattr(build.os, "access", lambda path, mode: Path(path).parent != cached.parent
                        and real_access(path, mode))
    assert jvm_sink._driver_jar() == tmp_path / "debian.jar"
