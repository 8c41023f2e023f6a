"""No part of a secret in any message, on every path that can carry connection text.

Paths: a connection string libpq cannot parse, invalid settings, a refused
connection, a failed login, a failed reconnect in the middle of a stream, and
the exceptions the writer re-raises from ``process()``/``close()``. For each, the
exception's ``str``/``repr``, its formatted traceback (with any chained
exception), its pickle, the log records and the writer's ``repr`` are searched.
"""

from __future__ import annotations

import logging
import pickle
import re
import time
import traceback

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from pack_lab.local_postgres import free_port
from rtm_lakebase.postgres.connection import (
    ConnectionSettings,
    ConnectionSettingsError,
    as_connection_settings,
    connect,
    parse_dsn,
)
from rtm_lakebase.sink import PostgresForeachWriter, SinkSettings

SECRET = "Zq8Xv2Lk-Wm4Pt"  # distinctive: no 5-letter run of it occurs in normal text


def texts_of(exc: BaseException) -> list[str]:
    """Everything a user or a log collector can see of an exception."""
    return [str(exc), repr(exc), "".join(traceback.format_exception(exc)),
            pickle.dumps(exc).decode("latin-1")]


def assert_no_part(secret: str, *texts: str, min_len: int = 5) -> None:
    fragments = {secret[i:i + min_len] for i in range(len(secret) - min_len + 1)} | {secret}
    for text in texts:
        leaked = [f for f in fragments if f.strip() and f in text]
        assert not leaked, f"secret fragment {leaked[0]!r} in: {text[:300]!r}"


# -- connection strings libpq cannot parse -----------------------------------------

@pytest.mark.parametrize("dsn, problem", [
    (f"host=db.example.com user=u password={SECRET[:7]} {SECRET[7:]}", "quoted"),  # unquoted space
    (f"host=db.example.com password={SECRET[:7]} {SECRET[7:]}=x user=u", "unknown parameter"),
    (f"host=db.example.com password='{SECRET}", "closing quote"),
    (f"postgresql://u:{SECRET[:7]} {SECRET[7:]}@db.example.com/db", "%20"),
    (f"postgresql://u:{SECRET}%zz@db.example.com/db", "hex"),
    (f"postgresql://u:{SECRET}%00@db.example.com/db", "NUL"),
    (f"postgresql://u:{SECRET}@db.example.com/db?{SECRET}=1", "query"),
    (f"postgresql://u:{SECRET}@db.example.com/db?{SECRET}", "without '='"),
    (f"postgresql://u:{SECRET}@[::1/db", "IPv6"),
    (f"postgresql://u:5432/{SECRET}@db.example.com/db", "percent-encoded"),  # host u, dbname ...@...
    (f"postgresql://u:{SECRET[:5]}/{SECRET[5:]}@db.example.com/db", "percent-encoded"),
    (f"host=db.example.com password={SECRET}\x00tail", "NUL"),
])
def test_unparseable_connection_string_names_the_problem_not_the_text(dsn, problem):
    for build in (ConnectionSettings.from_dsn, as_connection_settings, parse_dsn,
                  lambda d: PostgresForeachWriter(d, SinkSettings(table="t"))):
        with pytest.raises(ConnectionSettingsError) as info:
            build(dsn)
        assert problem in str(info.value)
        assert PARSE_MESSAGE.match(str(info.value))  # one line, printable by a command-line tool
        assert isinstance(info.value, ValueError)
        assert info.value.__cause__ is None
        assert info.value.__context__ is None or info.value.__suppress_context__
        assert_no_part(SECRET, *texts_of(info.value), min_len=4)


PARSE_MESSAGE = re.compile(r"\Acannot parse the connection string: [^\n]+ \(its text is not shown: "
                           r"it may hold a password\)\Z|\Acannot parse the connection string: it contains a NUL "
                           r"character\Z")
SECRET_TEXT = st.text(alphabet=st.sampled_from("QXJZqxjz79 %'\"=@/:?&[]\\\x00#,"), min_size=1, max_size=24)


@settings(max_examples=400, deadline=None, database=None)
@given(SECRET_TEXT, st.sampled_from(["keyword", "uri", "uri-query"]))
def test_generated_passwords_never_leak_from_parse_errors(password, form):
    if form == "keyword":
        dsn = f"host=db.example.com user=u password={password} dbname=d"
    elif form == "uri":
        dsn = f"postgresql://u:{password}@db.example.com:5432/d"
    else:
        dsn = f"postgresql://u@db.example.com/d?password={password}&sslmode=require"
    try:
        parsed = ConnectionSettings.from_dsn(dsn)
    except ConnectionSettingsError as exc:
        assert "\n" not in str(exc)
        marked = "".join(c for c in password if c in "QXJZqxjz79")
        for text in texts_of(exc):
            for i in range(len(password) - 2):
                chunk = password[i:i + 3]
                if sum(c in "QXJZqxjz79" for c in chunk) >= 2:
                    assert chunk not in text, (chunk, text)
        assert marked not in str(exc) or len(marked) < 3
    else:  # libpq read it as some valid string; whatever it took for the password is not shown
        if parsed.password and len(parsed.password.reveal()) >= 4:
            assert parsed.password.reveal() not in repr(parsed) + parsed.describe()


@pytest.mark.parametrize("build, field", [
    (lambda: ConnectionSettings(host="h", port=f"54{SECRET}"), "port"),
    (lambda: ConnectionSettings.from_dsn(f"host=h port={SECRET}"), "port"),
    (lambda: ConnectionSettings.from_dsn(f"host=h connect_timeout={SECRET}"), "connect_timeout"),
    (lambda: ConnectionSettings.from_dsn(f"host=h keepalives_idle={SECRET}"), "keepalives_idle"),
    (lambda: ConnectionSettings(host="h", extra={"password": SECRET}), "password"),
    (lambda: ConnectionSettings(host="h", extra={SECRET: "x"}), "libpq"),
    (lambda: ConnectionSettings(host="h", extra={"sslmode": "disable"}), "sslmode"),
    (lambda: ConnectionSettings(host="h", sslmode=SECRET), "sslmode"),
    (lambda: ConnectionSettings(host="h", password=f"{SECRET}\x00"), "password"),
    (lambda: ConnectionSettings(host="h", password=f"{SECRET}\udc80"), "password"),
    (lambda: ConnectionSettings(host="h", password_provider=lambda: SECRET.encode()).connect_kwargs(),
     "password_provider"),
])
def test_invalid_settings_name_the_field_not_the_value(build, field):
    with pytest.raises(ConnectionSettingsError) as info:
        build()
    assert field in str(info.value)
    assert_no_part(SECRET, *texts_of(info.value), min_len=4)


def test_pgconnect_timeout_zero_is_refused(monkeypatch):
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "0")  # libpq: wait forever
    with pytest.raises(ConnectionSettingsError, match="PGCONNECT_TIMEOUT"):
        ConnectionSettings(host="127.0.0.1").connect_kwargs()


# -- connection failures, logins, reconnects: against real servers -----------------

def writer(connection, table="t", **options):
    options.setdefault("max_dwell_ms", 0)
    options.setdefault("backoff_initial_ms", 10)
    return PostgresForeachWriter(connection, SinkSettings(table=table, **options))


def require_password(server, password: str) -> str:
    """Switch a private server to scram-sha-256 for TCP logins; return its DSN without the password."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(password)))
        hba = server.data_dir / "pg_hba.conf"
        hba.write_text(re.sub(r"^(host\S*\s.*?)\btrust\s*$", r"\1scram-sha-256", hba.read_text(),
                              flags=re.MULTILINE))
        conn.execute("SELECT pg_reload_conf()")
    return server.dsn


def test_refused_connection_carries_no_secret(caplog):
    caplog.set_level(logging.DEBUG)
    dsn = f"postgresql://alice:{SECRET}@127.0.0.1:{free_port()}/db?connect_timeout=2"
    w = writer(dsn, max_retries=1)
    with pytest.raises(Exception) as info:
        w.open(0, 0)
    assert "127.0.0.1" in str(info.value)
    assert_no_part(SECRET, *texts_of(info.value), caplog.text, repr(w), str(vars(w)))
    with pytest.raises(psycopg.OperationalError) as direct:
        connect(ConnectionSettings.from_dsn(dsn))
    assert_no_part(SECRET, *texts_of(direct.value))


@pytest.mark.postgres
def test_failed_login_carries_no_secret(pg_server, caplog):
    dsn = require_password(pg_server, "Rq9-Kq3Vb9Xw")
    caplog.set_level(logging.DEBUG)
    for settings_ in (ConnectionSettings.from_dsn(dsn, password=SECRET),
                      ConnectionSettings.from_dsn(dsn, password_provider=_wrong_token)):
        with pytest.raises(psycopg.OperationalError) as direct:
            connect(settings_)
        w = writer(settings_, max_retries=3)
        with pytest.raises(Exception) as info:
            w.open(0, 0)
        assert "password authentication failed" in str(info.value)
        assert w.metrics.retries == 0  # a refused login is not retried
        for secret in (SECRET, _wrong_token(), "Rq9-Kq3Vb9Xw"):
            assert_no_part(secret, *texts_of(info.value), *texts_of(direct.value), caplog.text, repr(w))


def _wrong_token() -> str:
    return "tok-Hj5Rn8Vc-Dw2Qs"


@pytest.mark.postgres
def test_failed_reconnect_mid_stream_carries_no_secret(pg_server, caplog):
    # no English fragment: every 5-character piece is looked for in the log ("Second" matched "seconds")
    first, second = "Fq1-Bx7Nq4Zk", "Wv2-Gm3Tj8Yr"
    dsn = require_password(pg_server, first)
    with psycopg.connect(dsn, password=first, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id bigint PRIMARY KEY, version bigint, name text)")
    caplog.set_level(logging.DEBUG)
    w = writer(ConnectionSettings.from_dsn(dsn, password=first), max_batch_rows=5, max_retries=2)
    w.open(0, 0)
    for i in range(5):
        w.process({"id": i, "version": 1, "name": "x"})
    deadline = time.monotonic() + 30
    while w.metrics.rows_written < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.metrics.rows_written == 5
    with psycopg.connect(dsn, password=first, autocommit=True) as conn:  # rotate, then cut the sink off
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(second)))
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE application_name = 'spark-foreach-sink'")
    with pytest.raises(Exception) as info:
        for i in range(5, 40):
            w.process({"id": i, "version": 1, "name": "x"})
            time.sleep(0.01)
        w.close(None)
    try:
        w.close(info.value)  # what Spark does after process() raised; may re-raise the same error
    except Exception as again:
        assert_no_part(first, *texts_of(again))
    assert "password authentication failed" in str(info.value)
    assert_no_part(first, *texts_of(info.value), caplog.text, repr(w), pickle.dumps(info.value).decode("latin-1"))
    assert_no_part(second, caplog.text)


def test_secret_libpq_parameters_in_extra_are_kept_as_secrets():
    import dataclasses

    settings = ConnectionSettings.from_dsn(f"host=db.example.com sslpassword={SECRET} user=u")
    assert settings.connect_kwargs()["sslpassword"] == SECRET  # libpq still gets it
    for text in (repr(settings), str(dataclasses.asdict(settings)), str(vars(settings)), settings.describe()):
        assert_no_part(SECRET, text)
    by_parts = ConnectionSettings(host="h", extra={"oauth_client_secret": SECRET})
    assert by_parts.connect_kwargs()["oauth_client_secret"] == SECRET
    assert_no_part(SECRET, str(vars(by_parts)))
    assert pickle.loads(pickle.dumps(by_parts)).connect_kwargs()["oauth_client_secret"] == SECRET
