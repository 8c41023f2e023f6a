"""The libpq environment fills what the settings leave out, as psycopg users expect.

Against a private server with password logins: settings that name nothing
connect through ``PGHOST``/``PGPORT``/``PGDATABASE``/``PGUSER``/``PGPASSWORD``
or ``.pgpass``; ``PGSSLMODE`` and ``PGCONNECT_TIMEOUT`` are honoured; an
explicit ``connect_timeout`` always reaches psycopg.
"""

from __future__ import annotations

import re
import socket

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from rtm_lakebase.postgres.connection import ConnectionSettings, connect

PASSWORD = "Env-Pw-Rk7Tq2Zc"
LIBPQ_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE",
              "PGSSLMODE", "PGCONNECT_TIMEOUT", "PGSERVICE", "PGSERVICEFILE", "PGAPPNAME")


@pytest.fixture(autouse=True)
def clean_libpq_env(monkeypatch, tmp_path):
    for name in LIBPQ_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.pgpass or ~/.pg_service.conf of the machine's user


@pytest.fixture
def password_server(pg_server):
    """The private server with scram logins; yields its DSN parts (no password)."""
    with psycopg.connect(pg_server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(PASSWORD)))
        hba = pg_server.data_dir / "pg_hba.conf"
        hba.write_text(re.sub(r"^(host\S*\s.*?)\btrust\s*$", r"\1scram-sha-256", hba.read_text(),
                              flags=re.MULTILINE))
        conn.execute("SELECT pg_reload_conf()")
    return conninfo_to_dict(pg_server.dsn)


def whoami(settings: ConnectionSettings) -> tuple:
    with connect(settings, autocommit=True) as conn:
        return conn.execute("SELECT current_user, current_database(), inet_server_port(), "
                            "current_setting('application_name')").fetchone()


@pytest.mark.postgres
def test_environment_fills_every_part(password_server, monkeypatch):
    parts = password_server
    monkeypatch.setenv("PGHOST", parts["host"])
    monkeypatch.setenv("PGPORT", str(parts["port"]))
    monkeypatch.setenv("PGDATABASE", parts["dbname"])
    monkeypatch.setenv("PGUSER", parts["user"])
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    settings = ConnectionSettings()
    assert whoami(settings) == (parts["user"], parts["dbname"], int(parts["port"]), "spark-foreach-sink")
    assert f"port={parts['port']}" in settings.describe() and "127.0.0.1" in settings.describe()
    assert PASSWORD not in repr(settings) + settings.describe()


@pytest.mark.postgres
def test_pgpass_file_supplies_the_password(password_server, monkeypatch, tmp_path):
    parts = password_server
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{parts['host']}:{parts['port']}:*:{parts['user']}:{PASSWORD}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    settings = ConnectionSettings(host=parts["host"], port=int(parts["port"]), user=parts["user"],
                                  dbname=parts["dbname"])
    assert whoami(settings)[0] == parts["user"]


@pytest.mark.postgres
def test_pgsslmode_is_honoured_even_for_a_local_server(password_server, monkeypatch):
    parts = password_server
    settings = ConnectionSettings(host=parts["host"], port=int(parts["port"]), user=parts["user"],
                                  dbname=parts["dbname"], password=PASSWORD)
    assert whoami(settings)[0] == parts["user"]  # local: no TLS by default, and the server has none
    monkeypatch.setenv("PGSSLMODE", "require")
    with pytest.raises(psycopg.OperationalError, match="(?i)ssl"):
        connect(settings)


@pytest.mark.postgres
def test_a_name_gets_tls_and_the_error_says_why(password_server):
    parts = password_server
    settings = ConnectionSettings(host="localhost", port=int(parts["port"]), user=parts["user"],
                                  dbname=parts["dbname"], password=PASSWORD)
    with pytest.raises(psycopg.OperationalError) as info:
        connect(settings)
    assert "does not support SSL" in str(info.value) and "numeric loopback" in str(info.value)
    assert PASSWORD not in str(info.value)
    assert whoami(ConnectionSettings(host="localhost", port=int(parts["port"]), user=parts["user"],
                                     dbname=parts["dbname"], password=PASSWORD, sslmode="disable"))


def test_connect_timeout_always_passed(monkeypatch):
    assert ConnectionSettings(host="h").connect_kwargs()["connect_timeout"] == 10
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "3")
    assert ConnectionSettings(host="h").connect_kwargs()["connect_timeout"] == 3
    assert ConnectionSettings(host="h", connect_timeout=7).connect_kwargs()["connect_timeout"] == 7
    assert ConnectionSettings.from_dsn("host=h connect_timeout=5").connect_kwargs()["connect_timeout"] == 5


def test_pgconnect_timeout_bounds_a_silent_server(monkeypatch):
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "2")
    with socket.socket() as listener:  # accepts TCP, never answers the handshake
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        settings = ConnectionSettings(host="127.0.0.1", port=listener.getsockname()[1], user="u", dbname="d")
        with pytest.raises(psycopg.OperationalError, match="(?i)timeout"):
            connect(settings)


def test_settings_left_out_are_not_sent(monkeypatch):
    kwargs = ConnectionSettings().connect_kwargs()
    assert not {"host", "port", "dbname", "user", "password", "hostaddr"} & set(kwargs)
    assert kwargs["sslmode"] == "disable"  # libpq's default host is a Unix socket here
    monkeypatch.setenv("PGHOST", "ep-x.database.cloud.databricks.com")
    assert ConnectionSettings().connect_kwargs()["sslmode"] == "require"


def test_bad_environment_fails_open_at_once_without_retries(monkeypatch):
    from rtm_lakebase.postgres.connection import ConnectionSettingsError
    from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

    monkeypatch.setenv("PGSSLMODE", "yes-please")
    writer = PostgresForeachWriter(ConnectionSettings(host="127.0.0.1", port=1),
                                   SinkSettings(table="t", max_retries=5, backoff_initial_ms=1000))
    with pytest.raises(ConnectionSettingsError, match="PGSSLMODE"):
        writer.open(0, 0)
    assert writer.metrics.retries == 0
