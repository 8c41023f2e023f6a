"""Fixtures for the fast foreach path's tests: the shared session, checked to carry the writer's jar."""

from __future__ import annotations

import os
import shutil

import pytest

from rtm_lakebase.foreach import FastForeachUnavailable, foreach_jars


def _have_javac() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "javac"), os.X_OK):
        return True
    return shutil.which("javac") is not None


@pytest.fixture(scope="session")
def fast_jars():
    try:
        return foreach_jars()
    except FastForeachUnavailable as exc:
        if not _have_javac():
            pytest.skip(f"no javac on this machine, so the fast foreach writer is not built: {exc}")
        pytest.fail(f"javac is here but the fast foreach writer is not usable: {exc}")


@pytest.fixture
def fast_spark(spark, fast_jars):
    """The shared session, checked to have the writer class on its classpath."""
    from py4j.java_gateway import JavaClass

    if not isinstance(spark.sparkContext._jvm.rtm_lakebase.foreach.LowLatencyPythonForeachWriter, JavaClass):
        pytest.fail(f"the fast foreach writer is not on the shared session's classpath "
                    f"(spark.jars={spark.conf.get('spark.jars', '')!r}); jars: {fast_jars}")
    return spark
