"""The JVM sink's token hook (rtm_lakebase/jvm/PgPasswordProvider.java, option password_provider).

A provider class compiled here (javac into a temporary folder, loaded through the task thread's
context class loader as a jar on spark.jars would be) gives the password at every new connection:
the first connect, and the reconnect after the server dropped the connection and the password
changed. A provider that fails, is missing or is not a provider fails the connect with one line
naming the class, never the secret (messages, toString, metrics, the server log).
"""

from __future__ import annotations

import shutil
import subprocess

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.jvm.sink import build_jvm_writer, jvm_sink_jars
from tests.jvm_sink.conftest import require_password_auth, wait_until
from tests.jvm_sink.jvm_rows import java_row, write_rows
from tests.sink.helpers import make_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

TOKEN_1, TOKEN_2 = "tok-one-7f3a9c", "tok-two-51d0e8"
LEAK = "s3cret-in-a-provider-message"
SOURCE = {
    "PropertyProvider": """
public class PropertyProvider implements rtm_lakebase.jvm.PgPasswordProvider {
    public static int calls;
    public String password() { calls++; return System.getProperty("rtm.test.token"); }
}""",
    "FailingProvider": f"""
public class FailingProvider implements rtm_lakebase.jvm.PgPasswordProvider {{
    public String password() {{ throw new IllegalStateException("{LEAK}"); }}
}}""",
    "NotAProvider": "public class NotAProvider { }",
}


@pytest.fixture(scope="module")
def provider_classes(tmp_path_factory):
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac: the test provider cannot be compiled")
    src = tmp_path_factory.mktemp("provider-src")
    out = tmp_path_factory.mktemp("provider-classes")
    files = []
    for name, text in SOURCE.items():
        (src / "rtm_test").mkdir(exist_ok=True)
        path = src / "rtm_test" / f"{name}.java"
        path.write_text("package rtm_test;\n" + text)
        files.append(str(path))
    sink_jar = jvm_sink_jars()[0]
    subprocess.run([javac, "--release", "17", "-cp", sink_jar, "-d", str(out), *files], check=True)
    return out


@pytest.fixture
def provider_loader(jvm_spark, provider_classes):
    """The test classes on this (pinned py4j) thread's context class loader, as a task has spark.jars."""
    jvm = jvm_spark.sparkContext._jvm
    thread = jvm.java.lang.Thread.currentThread()
    before = thread.getContextClassLoader()
    urls = jvm_spark.sparkContext._gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(provider_classes)).toURI().toURL()
    thread.setContextClassLoader(jvm.java.net.URLClassLoader(urls, before))
    yield jvm
    thread.setContextClassLoader(before)


@pytest.fixture(scope="module")
def auth_server():
    from pack_lab.local_postgres import EmbeddedPostgres

    with EmbeddedPostgres(log=lambda _msg: None) as server:
        require_password_auth(server, TOKEN_1)
        yield server


def _dsn(server) -> str:
    return f"host=127.0.0.1 port={server.port} dbname=postgres user=postgres"


def _admin(server) -> psycopg.Connection:
    return psycopg.connect(_dsn(server) + f" password={TOKEN_1}", autocommit=True)


@pytest.fixture(autouse=True)
def no_other_password(monkeypatch, tmp_path):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def test_the_provider_gives_the_password_at_connect_and_at_reconnect(provider_loader, jvm_spark, auth_server,
                                                                     table_name):
    jvm = provider_loader
    jvm.java.lang.System.setProperty("rtm.test.token", TOKEN_1)
    admin = _admin(auth_server)
    make_table(admin, table_name)
    writer = build_jvm_writer(jvm_spark, dsn=_dsn(auth_server), table=table_name, max_dwell_ms=10,
                              password_provider_class="rtm_test.PropertyProvider")
    calls = jvm.java.lang.Class.forName("rtm_test.PropertyProvider", True,
                                        jvm.java.lang.Thread.currentThread().getContextClassLoader())
    ddl = "id BIGINT, version BIGINT, name STRING"

    def count():
        return admin.execute(f'SELECT count(*) FROM "{table_name}"').fetchone()[0]

    assert writer.open(0, 0)
    try:
        writer.process(java_row(jvm_spark, ddl, [1, 1, "a"]))
        wait_until(lambda: count() == 1, what="the first row")
        # The token rotates: the server takes only the new one, and drops the sink's connection.
        admin.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(TOKEN_2)))
        jvm.java.lang.System.setProperty("rtm.test.token", TOKEN_2)
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
        writer.process(java_row(jvm_spark, ddl, [2, 1, "b"]))
        writer.close(None)
    finally:
        admin.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(TOKEN_1)))
    assert count() == 2
    assert calls.getField("calls").getInt(None) >= 2  # first connect and the reconnect
    shown = writer.toString() + writer.metrics()
    assert "password_provider=rtm_test.PropertyProvider" in shown
    assert TOKEN_1 not in shown and TOKEN_2 not in shown
    assert TOKEN_1 not in auth_server.logfile.read_text() and TOKEN_2 not in auth_server.logfile.read_text()


@pytest.mark.parametrize("cls, match", [
    ("rtm_test.FailingProvider", "password_provider rtm_test.FailingProvider failed: java.lang.IllegalStateException"),
    ("rtm_test.NotAProvider", "does not implement rtm_lakebase.jvm.PgPasswordProvider"),
    ("rtm_test.Missing", "password_provider class rtm_test.Missing is not on the classpath"),
])
def test_a_provider_that_cannot_give_a_password_fails_in_one_line_without_the_secret(
        provider_loader, jvm_spark, auth_server, table_name, cls, match):
    writer = build_jvm_writer(jvm_spark, dsn=_dsn(auth_server), table=table_name, password_provider_class=cls,
                              max_retries=0)
    with pytest.raises(Exception) as info:
        write_rows(writer, [])
    java = getattr(info.value, "java_exception", None)
    message = java.getMessage() if java is not None else str(info.value)
    assert match in message and "\n" not in message, message
    assert LEAK not in str(info.value) and LEAK not in message


def test_provider_options_are_checked_on_the_driver(jvm_spark):
    with pytest.raises(ValueError, match="not both"):
        build_jvm_writer(jvm_spark, dsn="host=h dbname=d password=pw", table="t", password_provider_class="a.B")
    with pytest.raises(ValueError, match="must be a Java class name"):
        build_jvm_writer(jvm_spark, dsn="host=h dbname=d", table="t", password_provider_class="not a class")
