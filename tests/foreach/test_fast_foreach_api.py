"""start_foreach_query's refusals: one line naming the cause, for what cannot work (no Spark needed)."""

from __future__ import annotations

import hashlib
import shutil

import pytest

import rtm_lakebase.foreach as ff


def test_a_missing_jar_is_one_line_naming_the_build_command(monkeypatch, tmp_path):
    monkeypatch.setenv(ff.JAR_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(ff.FastForeachUnavailable) as info:
        ff.foreach_jars()
    message = str(info.value)
    assert "\n" not in message
    assert "nope.jar not found" in message and "python -m rtm_lakebase.jvm build" in message


def test_a_jar_older_than_its_source_is_refused(monkeypatch, tmp_path):
    source = tmp_path / "LowLatencyPythonForeachWriter.java"
    shutil.copy(ff.SOURCE_FILE, source)
    jar = tmp_path / "build" / "rtm-lakebase-foreach.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"PK")
    monkeypatch.delenv(ff.JAR_ENV, raising=False)
    monkeypatch.setattr(ff, "SOURCE_FILE", source)
    monkeypatch.setattr(ff, "DEFAULT_JAR", jar)
    jar.with_suffix(".sha256").write_text(hashlib.sha256(source.read_bytes()).hexdigest() + "\n")
    assert ff.foreach_jars() == [str(jar)]  # current: accepted
    source.write_text(source.read_text() + "\n// edited\n")
    with pytest.raises(ff.FastForeachUnavailable, match="is older than LowLatencyPythonForeachWriter.java"):
        ff.foreach_jars()
    jar.with_suffix(".sha256").unlink()  # never built by the script: no stamp
    with pytest.raises(ff.FastForeachUnavailable, match="is older than"):
        ff.foreach_jars()


@pytest.mark.parametrize("version", ["3.5.3", "4.0.1", "4.1.5", "4.2.2", "4.3.1", "4.4.0", "5.0.0", "dev",
                                     "4.3.0-SNAPSHOT", "4.1.4.dev0", "4.1", ""])
def test_an_unproven_spark_version_is_refused_naming_the_releases_and_the_alternatives(version):
    with pytest.raises(ff.FastForeachUnavailable) as info:
        ff.check_version(version)
    message = str(info.value)
    assert "\n" not in message
    assert f"Spark {version} is not supported" in message
    assert "open-source Apache Spark 4.1.0-4.1.4, 4.2.0-4.2.1, 4.3.0" in message
    assert "start_jvm_sink_query" in message and "df.writeStream.foreach(writer)" in message


@pytest.mark.parametrize("version", ["4.1.0", "4.1.4", "4.2.0", "4.2.1", "4.3.0"])
def test_proven_versions_pass(version):
    ff.check_version(version)


def test_the_proven_releases_are_the_ones_the_tests_run():
    # The fast path's version tests run pack_lab.spark_versions.OTHER_VERSIONS; the main suite runs the pin.
    from pack_lab import spark_versions

    assert {".".join(map(str, r)) for r in ff.PROVEN_RELEASES} == set(spark_versions.ALL_VERSIONS)


class _FakeSession:
    """What the guard reads of a session: its version and its configuration."""

    def __init__(self, version: str, conf: dict[str, str]):
        self.version = version
        self.conf = self
        self._conf = conf

    def get(self, key, default=None):
        return self._conf.get(key, default)


@pytest.mark.parametrize("version", ["4.1.0", "4.2.0", "3.5.2"])
def test_a_databricks_runtime_is_refused_whatever_spark_version_it_reports(monkeypatch, version):
    # Databricks Runtime 18 reports Spark 4.1.0 and 19 reports 4.2.0: the version alone would pass.
    monkeypatch.delenv(ff.DATABRICKS_ENV, raising=False)
    session = _FakeSession(version, {ff.DATABRICKS_CONF: "18.1.x-scala2.13"})
    with pytest.raises(ff.FastForeachUnavailable) as info:
        ff.check_runtime(session)
    message = str(info.value)
    assert "\n" not in message
    assert "Databricks Runtime (18.1.x-scala2.13" in message
    assert "start_jvm_sink_query" in message and "df.writeStream.foreach(writer)" in message
    monkeypatch.setenv(ff.DATABRICKS_ENV, "19.0")
    with pytest.raises(ff.FastForeachUnavailable, match=r"Databricks Runtime \(19\.0, Spark"):
        ff.check_runtime(_FakeSession(version, {}))


def test_open_source_spark_without_databricks_signs_passes(monkeypatch):
    monkeypatch.delenv(ff.DATABRICKS_ENV, raising=False)
    ff.check_runtime(_FakeSession("4.2.1", {}))
    assert ff.databricks_runtime(_FakeSession("4.2.1", {})) is None


@pytest.mark.spark
def test_the_guard_reads_a_real_session(spark, monkeypatch):
    monkeypatch.delenv(ff.DATABRICKS_ENV, raising=False)
    ff.check_runtime(spark)  # this suite's PySpark 4.3.0, open source
    spark.conf.set(ff.DATABRICKS_CONF, "18.1.x-scala2.13")
    try:
        with pytest.raises(ff.FastForeachUnavailable, match="does not run on Databricks Runtime"):
            ff.check_runtime(spark)
    finally:
        spark.conf.unset(ff.DATABRICKS_CONF)
    ff.check_runtime(spark)


class _ConnectLikeDataFrame:
    """What a Spark Connect DataFrame does when asked for its JVM handle."""

    @property
    def _jdf(self):
        from pyspark.errors import PySparkAttributeError

        raise PySparkAttributeError(errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED", messageParameters={"attr_name": "_jdf"})


def test_spark_connect_is_refused_in_one_line():
    with pytest.raises(ff.FastForeachUnavailable) as info:
        ff.start_foreach_query(_ConnectLikeDataFrame(), print, checkpoint_location="/tmp/x")
    message = str(info.value)
    assert "\n" not in message
    assert "Spark Connect" in message and "PySparkAttributeError" in message


@pytest.mark.parametrize("bad", [{"worker_batch_rows": 0}, {"worker_batch_bytes": 0}, {"worker_batch_rows": True},
                                 {"worker_batch_rows": 2**31}])
def test_bad_caps_are_value_errors(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ff.build_jvm_writer(_ConnectLikeDataFrame(), print, **bad)


@pytest.mark.parametrize("old, new", [("max_batch_rows", "worker_batch_rows"), ("max_batch_bytes", "worker_batch_bytes")])
def test_old_cap_names_still_work_with_a_warning(old, new):
    """max_batch_rows here meant the batch sent to the worker; in SinkSettings it is the flush size: renamed."""
    with pytest.warns(FutureWarning, match=f"{old}=.*{new}="), pytest.raises(ValueError, match=new):
        ff.build_jvm_writer(_ConnectLikeDataFrame(), print, **{old: 0})
    with pytest.raises(TypeError, match="not both"):
        ff.build_jvm_writer(_ConnectLikeDataFrame(), print, **{old: 5, new: 6})


def test_trigger_needs_exactly_one_entry():
    with pytest.raises(ValueError, match="exactly one entry"):
        ff.start_foreach_query(_ConnectLikeDataFrame(), print, checkpoint_location="/tmp/x",
                               trigger={"realTime": "5 seconds", "once": True})


# Shapes of real query messages (PySpark 4.1.4, pack_lab/foreach_lab.py's raise scenario), cut down.
_TASK = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted due to stage failure: "
         "Task 0 in stage 0.0 failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 (TID 0) "
         "(192.0.2.2 executor driver): java.lang.InterruptedException: sleep interrupted\n"
         "\tat java.base/java.lang.Thread.sleep(Native Method)\n")
_WORKER = ("org.apache.spark.sql.execution.streaming.sources.ForeachUserFuncException: [FOREACH_USER_FUNCTION_ERROR] "
           "An error occurred in the user provided function in foreach sink. Reason: Traceback\n"
           "ValueError: boom on row 7\n")


@pytest.mark.parametrize(("message", "expected"), [
    # stock foreach: the worker's error is the task's error
    ("[STREAM_FAILED] Query [id = 1] terminated with exception: [FOREACH_USER_FUNCTION_ERROR] An error occurred",
     ("error", "[FOREACH_USER_FUNCTION_ERROR]")),
    ("[STREAM_FAILED] Query [id = 1] terminated with exception: Job aborted due to stage failure: Lost task 0.0 in "
     "stage 1.0 (TID 1) (192.0.2.2 executor driver): org.apache.spark.SparkException: Python worker exited "
     "unexpectedly (crashed).\nCaused by: java.io.EOFException\n",
     ("error", "Python worker exited unexpectedly")),
    # the fast path after the fix: the interrupt's exception, caused by the worker's error
    (_TASK + "Caused by: " + _WORKER, ("cause", "[FOREACH_USER_FUNCTION_ERROR]")),
    # the defect: the worker's error only a suppressed exception of the interrupt's
    (_TASK + "\tSuppressed: " + _WORKER, ("interrupt", "java.lang.InterruptedException")),
])
def test_reported_error_tells_a_named_cause_from_a_bare_interrupt(message, expected):
    from pack_lab.foreach_lab import reported_error

    assert reported_error(message) == expected
