"""The JVM sink takes what the DSN leaves out from libpq's environment, on the DRIVER.

build_jvm_writer (rtm_lakebase/jvm/sink.py, _jdbc_parts) reads PGHOST, PGPORT, PGDATABASE,
PGUSER, PGPASSWORD, PGSSLMODE and PGCONNECT_TIMEOUT when the writer is built and puts the result
into the writer's options (URL, user, password), which travel to the executors: an executor's own
environment is never read. Proven against a server that requires a password: the writer built
from the environment alone writes after the environment is gone.
"""

from __future__ import annotations

import pytest

from rtm_lakebase.jvm.sink import build_jvm_writer
from tests.jvm_sink.conftest import require_password_auth
from tests.jvm_sink.jvm_rows import java_row, write_rows
from tests.sink.helpers import make_table

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

PASSWORD = "env-pw-93b1"
ENV = ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGSSLMODE", "PGCONNECT_TIMEOUT",
       "PGHOSTADDR", "PGSERVICE", "PGPASSFILE")


@pytest.fixture(scope="module")
def env_server():
    from pack_lab.local_postgres import EmbeddedPostgres

    with EmbeddedPostgres(log=lambda _msg: None) as server:
        require_password_auth(server, PASSWORD)
        yield server


@pytest.fixture
def libpq_env(env_server, monkeypatch, tmp_path):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    values = {"PGHOST": "127.0.0.1", "PGPORT": str(env_server.port), "PGDATABASE": "postgres",
              "PGUSER": "postgres", "PGPASSWORD": PASSWORD, "PGSSLMODE": "disable", "PGCONNECT_TIMEOUT": "7"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return monkeypatch


def test_an_empty_dsn_takes_everything_from_the_environment_on_the_driver(jvm_spark, env_server, libpq_env,
                                                                          table_name):
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={env_server.port} dbname=postgres user=postgres "
                         f"password={PASSWORD}", autocommit=True) as admin:
        make_table(admin, table_name)
        writer = build_jvm_writer(jvm_spark, dsn="", table=table_name, mode="append")
        shown = writer.toString()
        assert f"127.0.0.1:{env_server.port}/postgres" in shown and "connectTimeout=7" in shown, shown
        assert "sslmode=disable" in shown and "user=postgres" in shown and PASSWORD not in shown
        for name in ENV:  # what an executor sees: none of it; the writer already carries it
            libpq_env.delenv(name, raising=False)
        metrics = write_rows(writer, [java_row(jvm_spark, "id BIGINT, version BIGINT, name STRING", [1, 1, "x"])])
        assert "rows_written=1" in metrics
        assert admin.execute(f'SELECT count(*) FROM "{table_name}"').fetchone() == (1,)


def test_pgsslmode_from_the_environment_reaches_the_jdbc_driver(jvm_spark, libpq_env, table_name):
    libpq_env.setenv("PGSSLMODE", "require")  # this server has no TLS: the connect must fail on it
    writer = build_jvm_writer(jvm_spark, dsn="", table=table_name, mode="append", max_retries=0)
    assert "sslmode=require" in writer.toString()
    with pytest.raises(Exception) as info:
        write_rows(writer, [])
    assert "SSL" in str(info.value) and PASSWORD not in str(info.value)
