"""Lakebase OAuth through ``rtm_lakebase.postgres.oauth.lakebase_token`` with a fake token source.

The fake stands in for ``databricks.sdk.WorkspaceClient`` only: the provider's
own code runs. Each credential it issues becomes the role's only valid
password, so an "expired" token is refused by the real server exactly as
Lakebase refuses one at login. The calls the provider makes are bound to the
real SDK's signatures (databricks-sdk is pinned in the dev extra).
"""

from __future__ import annotations

import functools
import inspect
import logging
import pickle
import re
import subprocess
import sys
import time
import traceback
import uuid

import psycopg
import pytest
from psycopg import sql

from rtm_lakebase.postgres import oauth as oauth
from rtm_lakebase.postgres.connection import ConnectionSettings
from rtm_lakebase.postgres.oauth import LakebaseOAuthError, lakebase_token
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

ENDPOINT = "projects/demo/branches/production/endpoints/primary"
ADMIN_PASSWORD = "Admin-Pw-Vm3Kx8Qd"


class FakeTokenSource:
    """``WorkspaceClient`` look-alike: ``postgres``/``database`` APIs issuing distinct tokens.

    ``on_issue(token)`` runs before a token is handed out (the test makes it the
    role's password, which "expires" every earlier one).
    """

    def __init__(self, on_issue=lambda token: None):
        self.issued: list[str] = []
        self.calls: list[tuple[str, dict]] = []
        self.on_issue = on_issue
        self.postgres = self._Api(self, "postgres")
        self.database = self._Api(self, "database")

    class _Api:
        def __init__(self, source, name):
            self.source, self.name = source, name

        def generate_database_credential(self, **kwargs):
            source = self.source
            source.calls.append((self.name, kwargs))
            token = f"tok{len(source.issued) + 1}-{uuid.uuid4().hex}"
            source.on_issue(token)
            source.issued.append(token)
            return type("DatabaseCredential", (), {"token": token, "expire_time": None})()


@pytest.fixture
def token_source(monkeypatch):
    source = FakeTokenSource()
    monkeypatch.setattr(oauth, "_client", source)
    return source


def test_calls_match_the_real_sdk_signatures(token_source):
    from databricks.sdk.service.database import DatabaseAPI
    from databricks.sdk.service.postgres import PostgresAPI

    assert lakebase_token(ENDPOINT) == token_source.issued[0]
    assert lakebase_token(instance_name="my-instance") == token_source.issued[1]
    assert token_source.calls[0] == ("postgres", {"endpoint": ENDPOINT})
    real = {"postgres": PostgresAPI.generate_database_credential,
            "database": DatabaseAPI.generate_database_credential}
    for api, kwargs in token_source.calls:
        inspect.signature(real[api]).bind(None, **kwargs)  # TypeError if the SDK would refuse the call
    assert token_source.calls[1][1]["instance_names"] == ["my-instance"]


def test_every_call_gets_a_new_token(token_source):
    provider = functools.partial(lakebase_token, ENDPOINT)
    assert len({provider() for _ in range(3)}) == 3


def test_provider_is_picklable_and_carries_no_token(token_source):
    provider = functools.partial(lakebase_token, ENDPOINT)
    settings = ConnectionSettings(host="ep-x.database.cloud.databricks.com", user="sp",
                                  dbname="databricks_postgres", password_provider=provider)
    writer = PostgresForeachWriter(settings, SinkSettings(table="t"))
    clone = pickle.loads(pickle.dumps(writer))
    assert clone.connection.password_provider() == token_source.issued[-1]
    assert clone.connection.connect_kwargs()["sslmode"] == "require"
    for token in token_source.issued:
        assert token not in repr(clone) and token.encode() not in pickle.dumps(clone)


def test_missing_sdk_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(oauth, "_client", None)
    monkeypatch.setitem(sys.modules, "databricks.sdk", None)  # import fails as if not installed
    with pytest.raises(LakebaseOAuthError, match="databricks-sdk"):
        lakebase_token(ENDPOINT)


def test_sdk_is_imported_lazily():
    code = "import sys, rtm_lakebase.postgres.oauth, rtm_lakebase.postgres.connection; print('databricks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_argument_and_sdk_errors(monkeypatch):
    with pytest.raises(ValueError):
        lakebase_token()
    with pytest.raises(ValueError):
        lakebase_token(ENDPOINT, instance_name="x")

    class Failing:
        class postgres:
            @staticmethod
            def generate_database_credential(**kwargs):
                raise PermissionError("caller lacks CAN_USE on the project")

    monkeypatch.setattr(oauth, "_client", Failing())
    with pytest.raises(LakebaseOAuthError, match="CAN_USE") as info:
        lakebase_token(ENDPOINT)
    assert ENDPOINT in str(info.value) and info.value.__cause__ is None


def _switch_to_password_logins(server) -> None:
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(ADMIN_PASSWORD)))
        conn.execute("CREATE ROLE sink_sp LOGIN")
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, version bigint, name text)")
        conn.execute("GRANT ALL ON t TO sink_sp")
        hba = server.data_dir / "pg_hba.conf"
        hba.write_text(re.sub(r"^(host\S*\s.*?)\btrust\s*$", r"\1scram-sha-256", hba.read_text(),
                              flags=re.MULTILINE))
        conn.execute("SELECT pg_reload_conf()")


def _admin(server):
    return psycopg.connect(server.dsn, password=ADMIN_PASSWORD, autocommit=True)


@pytest.mark.postgres
def test_reconnect_after_expiry_logs_in_with_a_new_token(pg_server, monkeypatch, caplog):
    _switch_to_password_logins(pg_server)

    def make_only_valid_password(token):  # a new token "expires" every earlier one
        with _admin(pg_server) as conn:
            conn.execute(sql.SQL("ALTER ROLE sink_sp PASSWORD {}").format(sql.Literal(token)))

    source = FakeTokenSource(on_issue=make_only_valid_password)
    monkeypatch.setattr(oauth, "_client", source)
    caplog.set_level(logging.DEBUG)
    settings = ConnectionSettings.from_dsn(pg_server.dsn, user="sink_sp",
                                           password_provider=functools.partial(lakebase_token, ENDPOINT))
    writer = pickle.loads(pickle.dumps(  # as an executor gets it
        PostgresForeachWriter(settings, SinkSettings(table="t", max_batch_rows=5, max_dwell_ms=0,
                                                     backoff_initial_ms=10))))
    writer.open(0, 0)
    for i in range(5):
        writer.process({"id": i, "version": 1, "name": "before"})
    _wait(lambda: writer.metrics.rows_written >= 5)
    assert len(source.issued) == 1

    with _admin(pg_server) as conn:  # expiry: the token is refused from now on; the session is cut
        conn.execute("ALTER ROLE sink_sp PASSWORD 'expired-and-nobody-knows-it'")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'sink_sp'")
    for i in range(5, 10):
        writer.process({"id": i, "version": 1, "name": "after"})
    writer.close(None)

    assert writer.metrics.reconnects >= 1
    assert len(source.issued) >= 2  # the reconnect asked for a new credential ...
    with _admin(pg_server) as conn:  # ... and logged in with it: every row landed
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 10
    visible = [repr(writer), str(vars(writer)), caplog.text, pickle.dumps(writer).decode("latin-1"),
               writer.connection.describe()]
    for token in source.issued:
        assert not any(token in text for text in visible)


@pytest.mark.postgres
def test_a_refused_token_never_shows_in_the_error(pg_server, monkeypatch, caplog):
    _switch_to_password_logins(pg_server)
    source = FakeTokenSource()  # its tokens are never made valid: every login is refused
    monkeypatch.setattr(oauth, "_client", source)
    caplog.set_level(logging.DEBUG)
    settings = ConnectionSettings.from_dsn(pg_server.dsn, user="sink_sp",
                                           password_provider=functools.partial(lakebase_token, ENDPOINT))
    writer = PostgresForeachWriter(settings, SinkSettings(table="t", max_retries=2, backoff_initial_ms=10))
    with pytest.raises(Exception) as info:
        writer.open(0, 0)
    assert "password authentication failed" in str(info.value)
    texts = [str(info.value), repr(info.value), "".join(traceback.format_exception(info.value)),
             pickle.dumps(info.value).decode("latin-1"), caplog.text, repr(writer)]
    assert source.issued
    for token in source.issued:
        assert not any(token in text for text in texts)


def _wait(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_failing_token_source_fails_open_at_once(monkeypatch):
    class Down:
        class postgres:
            @staticmethod
            def generate_database_credential(**kwargs):
                raise TimeoutError("workspace unreachable after the SDK's own retries")

    monkeypatch.setattr(oauth, "_client", Down())
    settings = ConnectionSettings(host="127.0.0.1", port=1, user="sp",
                                  password_provider=functools.partial(lakebase_token, ENDPOINT))
    writer = PostgresForeachWriter(settings, SinkSettings(table="t", max_retries=5, backoff_initial_ms=1000))
    with pytest.raises(LakebaseOAuthError, match="unreachable"):
        writer.open(0, 0)
    assert writer.metrics.retries == 0


def test_no_databricks_authentication_is_a_clear_error(monkeypatch):
    import databricks.sdk

    def no_auth():
        raise ValueError("default auth: cannot configure default credentials")

    monkeypatch.setattr(oauth, "_client", None)
    monkeypatch.setattr(databricks.sdk, "WorkspaceClient", no_auth)
    with pytest.raises(LakebaseOAuthError, match="no usable authentication.*default credentials"):
        lakebase_token(ENDPOINT)
