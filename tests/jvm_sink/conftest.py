"""Fixtures for the JVM sink's tests: the shared session with the sink's jars, and helpers.

The tests skip only on a machine without ``javac`` (the set-up cannot build the
jar there, and says so); anywhere else a missing jar or driver fails them.
"""

from __future__ import annotations

import os
import re
import shutil
import time

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.jvm.sink import WRITER_CLASS, JvmSinkUnavailable, jvm_sink_jars


def _have_javac() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "javac"), os.X_OK):
        return True
    return shutil.which("javac") is not None


@pytest.fixture(scope="session")
def sink_jars():
    try:
        return jvm_sink_jars()
    except JvmSinkUnavailable as exc:
        if not _have_javac():
            pytest.skip(f"no javac on this machine, so the JVM sink is not built: {exc}")
        pytest.fail(f"javac is here but the JVM sink is not usable: {exc}")


@pytest.fixture
def jvm_spark(spark, sink_jars):
    """The shared session, checked to have the writer and the JDBC driver on its classpath."""
    from py4j.java_gateway import JavaClass

    jvm = spark.sparkContext._jvm
    for name, cls in ((WRITER_CLASS, jvm.rtm_lakebase.jvm.PostgresForeachWriter),
                      ("org.postgresql.Driver", jvm.org.postgresql.Driver)):
        if not isinstance(cls, JavaClass):
            pytest.fail(f"{name} is not on the shared session's classpath (spark.jars="
                        f"{spark.conf.get('spark.jars', '')!r}); jars: {sink_jars}")
    return spark


def require_password_auth(server, password: str) -> None:
    """Switch a private server from trust to scram-sha-256 for TCP logins."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
        hba = server.data_dir / "pg_hba.conf"
        text = re.sub(r"^(host\S*\s.*?)\btrust\s*$", r"\1scram-sha-256", hba.read_text(), flags=re.MULTILINE)
        hba.write_text(text)
        conn.execute("SELECT pg_reload_conf()")


def wait_until(predicate, query=None, timeout: float = 90.0, what: str = "condition", interval: float = 0.05):
    """Poll ``predicate()`` until truthy; fail fast if ``query`` died."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if query is not None and not query.isActive:
            raise AssertionError(f"query stopped before {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def message_facts(message: str) -> dict:
    """The facts both sinks put in a failure's message: the row's key, the column, the SQLSTATE.

    Both write ``row with key K rejected at column C (type): reason [SQLSTATE X]``; tests
    compare these facts, not the sentence around them.
    """
    key = re.search(r"row with key (.+?) rejected", message)
    column = re.search(r"rejected at column ([^\s:(]+)", message)
    state = re.search(r"\[SQLSTATE ([0-9A-Z]{5})\]", message)
    return {"key": key.group(1) if key else None, "column": column.group(1) if column else None,
            "sqlstate": state.group(1) if state else None}


def query_error(query, timeout: float = 120.0) -> str:
    """The message the query died with (fails if it is still running after ``timeout``)."""
    try:
        query.awaitTermination(timeout)
    except Exception as exc:  # StreamingQueryException carries the task's error
        return str(exc)
    finally:
        query.stop()
    error = query.exception()
    if error is None:
        raise AssertionError(f"the query did not fail within {timeout:.0f} s")
    return str(error)
