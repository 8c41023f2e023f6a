"""The TLS rule: sslmode may default to ``disable`` only when every place libpq connects to is local.

No server needed: these check the ``sslmode`` handed to libpq for every way libpq
names a server (``host``, ``hostaddr``, lists, URI query parameters, a service
file, ``PGHOST``/``PGHOSTADDR``), and that the user's own choice wins.
"""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from rtm_lakebase.postgres.connection import ConnectionSettings, ConnectionSettingsError

LIBPQ_SERVER_VARS = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGSSLMODE", "PGSERVICE", "PGSERVICEFILE",
                     "PGSYSCONFDIR", "PGCONNECT_TIMEOUT", "PGDATABASE", "PGUSER", "PGPASSWORD")


@pytest.fixture(autouse=True)
def clean_libpq_env(monkeypatch, tmp_path):
    """Start each test from an environment without libpq variables (and no ~/.pg_service.conf)."""
    for name in LIBPQ_SERVER_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


def sslmode(dsn: str) -> str:
    return ConnectionSettings.from_dsn(dsn).connect_kwargs()["sslmode"]


@pytest.mark.parametrize("dsn", [
    "host=127.0.0.1 user=u",
    "host=127.8.9.10 user=u",
    "host=::1 user=u",
    "host=::ffff:127.0.0.1 user=u",
    "host=/var/run/postgresql user=u",
    "host=@abstract-socket user=u",
    "user=u",  # libpq's default: a Unix socket
    "host=127.0.0.1,::1,/tmp user=u",
    "host=db.example.com hostaddr=127.0.0.1 user=u",  # hostaddr is where it really goes
    "postgresql://u@127.0.0.1:5432/db",
    "postgresql://u@[::1]:5432/db",
    "postgresql:///db?host=/var/run/postgresql",
    "postgresql://u@db.example.com/db?hostaddr=127.0.0.1",
])
def test_local_servers_default_to_no_tls(dsn):
    assert sslmode(dsn) == "disable"


@pytest.mark.parametrize("dsn", [
    "host=db.example.com user=u",
    "host=localhost user=u",  # a name: the resolver decides where it goes
    "host=127.0.0.1.example.com user=u",  # a name that merely starts with "127."
    "host=127.evil.example user=u",
    "host=127.1 user=u",  # not a numeric address Python can read: treated as a name
    "host=10.0.0.5 user=u",
    "host=0.0.0.0 user=u",
    "host=127.0.0.1,db.example.com user=u",  # one remote host among local ones
    "host=/tmp hostaddr=10.1.2.3 user=u",  # hostaddr overrides the socket folder
    "host=/tmp,/tmp hostaddr=,10.1.2.3 user=u",
    "host=127.0.0.1 hostaddr=192.0.2.7 user=u",
    "postgresql://u@127.0.0.1/db?hostaddr=10.0.0.5",
    "postgresql://u@127.0.0.1/db?host=db.example.com",  # the query parameter wins in libpq
    "postgresql://u@127.0.0.1:5432,db.example.com:5433/db",
    "postgresql:///db?host=db.example.com",
])
def test_remote_servers_default_to_require(dsn):
    assert sslmode(dsn) == "require"


def test_query_parameters_are_what_libpq_uses():
    # libpq's own parser decides; these pin what it does with a host named twice.
    assert conninfo_to_dict("postgresql://u@127.0.0.1/db?host=db.example.com")["host"] == "db.example.com"


@pytest.mark.parametrize("env, settings, expected", [
    ({"PGHOST": "db.example.com"}, {}, "require"),
    ({"PGHOST": "127.0.0.1.example.com"}, {}, "require"),
    ({"PGHOST": "/var/run/postgresql"}, {}, "disable"),
    ({"PGHOST": "127.0.0.1"}, {}, "disable"),
    ({"PGHOSTADDR": "10.0.0.9"}, {"host": "/tmp"}, "require"),  # env hostaddr beats a socket host
    ({"PGHOSTADDR": "127.0.0.1"}, {"host": "db.example.com"}, "disable"),
    ({"PGHOST": "db.example.com"}, {"host": "127.0.0.1"}, "disable"),  # settings win over the environment
    ({"PGHOST": "/tmp"}, {"hostaddr": "203.0.113.4"}, "require"),
    ({"PGSSLMODE": "verify-full"}, {"host": "127.0.0.1"}, "verify-full"),  # the user's choice wins
    ({"PGSSLMODE": "verify-ca"}, {"host": "db.example.com"}, "verify-ca"),
    ({"PGSSLMODE": "require"}, {"host": "/tmp"}, "require"),
    ({"PGSSLMODE": "verify-full"}, {"host": "db.example.com", "sslmode": "require"}, "require"),
])
def test_libpq_environment_counts(monkeypatch, env, settings, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ConnectionSettings(**settings).connect_kwargs()["sslmode"] == expected


def test_a_service_file_names_the_server(monkeypatch, tmp_path):
    services = tmp_path / "services.conf"
    services.write_text("[remote]\nhost=db.example.com\nport=5433\n\n"
                        "[local]\nhost=/var/run/postgresql\n\n"
                        "[strict]\nhost=127.0.0.1\nsslmode=verify-full\n")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    assert sslmode("service=remote user=u") == "require"
    assert sslmode("service=local user=u") == "disable"
    assert sslmode("service=strict user=u") == "verify-full"  # its sslmode is the user's choice
    assert sslmode("service=remote host=127.0.0.1 user=u") == "disable"  # parameters beat the file
    with pytest.raises(ConnectionSettingsError, match="PGSERVICEFILE"):  # cannot be checked: refused
        sslmode("service=nowhere user=u")
    monkeypatch.setenv("PGSERVICE", "remote")
    assert ConnectionSettings(user="u").connect_kwargs()["sslmode"] == "require"


def test_home_service_file_is_read(monkeypatch, tmp_path):
    (tmp_path / ".pg_service.conf").write_text("[remote]\nhost=db.example.com\n")
    assert sslmode("service=remote user=u") == "require"


def test_explicit_weak_sslmode_wins_and_is_logged_once(caplog):
    caplog.set_level(logging.WARNING)
    settings = ConnectionSettings.from_dsn("host=weak-once.example.com sslmode=prefer user=u")
    for _ in range(3):
        assert settings.connect_kwargs()["sslmode"] == "prefer"
    warnings = [r for r in caplog.records if "sslmode=prefer" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "weak-once.example.com" in warnings[0].getMessage()


def test_weak_sslmode_from_pgsslmode_is_logged(monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv("PGSSLMODE", "disable")
    kwargs = ConnectionSettings(host="env-weak.example.com").connect_kwargs()
    assert kwargs["sslmode"] == "disable"
    assert "PGSSLMODE" in caplog.text and "env-weak.example.com" in caplog.text


def test_no_warning_for_strong_or_local(caplog):
    caplog.set_level(logging.WARNING)
    ConnectionSettings(host="strong.example.com", sslmode="verify-full").connect_kwargs()
    ConnectionSettings(host="127.0.0.1", sslmode="disable").connect_kwargs()
    ConnectionSettings(host="/tmp", sslmode="prefer").connect_kwargs()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("build", [
    lambda: ConnectionSettings(host="h", sslmode="requir"),
    lambda: ConnectionSettings.from_dsn("host=h sslmode=bogus"),
    lambda: ConnectionSettings(host="a,b", hostaddr="127.0.0.1,127.0.0.2,127.0.0.3"),
    lambda: ConnectionSettings(host="a,b,c", port="1,2"),
    lambda: ConnectionSettings.from_dsn("postgresql://u@a:1,b:2,c:3/db?port=1,2"),
])
def test_impossible_tls_or_host_settings_are_settings_errors(build):
    with pytest.raises(ConnectionSettingsError):
        build()


def test_bad_pgsslmode_is_a_settings_error(monkeypatch):
    monkeypatch.setenv("PGSSLMODE", "on")
    with pytest.raises(ConnectionSettingsError, match="PGSSLMODE"):
        ConnectionSettings(host="h").connect_kwargs()


# -- generated host lists: the oracle is written from libpq's documentation, apart from the module --

LOOPBACK = st.one_of(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255)).map(lambda t: "127.{}.{}.{}".format(*t)),
    st.just("::1"), st.just("0:0:0:0:0:0:0:1"), st.just("::ffff:127.0.0.1"))
REMOTE_IP = st.one_of(
    st.tuples(st.sampled_from([10, 192, 203, 8, 128, 126, 0]), st.integers(0, 255), st.integers(0, 255),
              st.integers(1, 254)).map(lambda t: "{}.{}.{}.{}".format(*t)),
    st.just("2001:db8::5"), st.just("::"))
NAME = st.one_of(
    st.sampled_from(["localhost", "db.example.com", "ep-x.database.cloud.databricks.com", "localhost.",
                     "ip6-localhost"]),
    LOOPBACK.map(lambda ip: ip.replace(":", "-") + ".example.com"),  # "127.0.0.1.example.com"
    st.from_regex(r"\A127\.[a-z0-9]{1,8}\.[a-z]{2,5}\Z"))
SOCKET = st.sampled_from(["/tmp", "/var/run/postgresql", "@abstract"])
HOST = st.one_of(LOOPBACK.map(lambda h: (h, True)), REMOTE_IP.map(lambda h: (h, False)),
                 NAME.map(lambda h: (h, False)), SOCKET.map(lambda h: (h, True)))
ADDR = st.one_of(st.just(("", None)), LOOPBACK.map(lambda a: (a, True)), REMOTE_IP.map(lambda a: (a, False)))


@st.composite
def server_lists(draw):
    hosts = draw(st.lists(HOST, min_size=1, max_size=4))
    addrs = draw(st.one_of(st.none(), st.lists(ADDR, min_size=len(hosts), max_size=len(hosts))))
    expected_local = True
    for i, (_, host_local) in enumerate(hosts):
        addr, addr_local = addrs[i] if addrs else ("", None)
        expected_local &= addr_local if addr else host_local
    params = {"host": ",".join(h for h, _ in hosts), "user": "u"}
    if addrs:
        params["hostaddr"] = ",".join(a for a, _ in addrs)
    return params, expected_local


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(server_lists(), st.sampled_from(["parts", "keyword", "uri-query", "environment"]))
def test_generated_host_lists(monkeypatch, case, form):
    params, expected_local = case
    monkeypatch.delenv("PGHOST", raising=False)
    monkeypatch.delenv("PGHOSTADDR", raising=False)
    if form == "environment":
        monkeypatch.setenv("PGHOST", params["host"])
        if "hostaddr" in params:
            monkeypatch.setenv("PGHOSTADDR", params["hostaddr"])
        kwargs = ConnectionSettings(user="u").connect_kwargs()
        assert kwargs["sslmode"] == ("disable" if expected_local else "require"), params
        return
    if form == "parts":
        settings_ = ConnectionSettings(**params)
    elif form == "keyword":
        settings_ = ConnectionSettings.from_dsn(make_conninfo("", **params))
    else:
        query = "&".join(f"{key}={value}" for key, value in params.items()
                         if key != "user").replace("@", "%40").replace("/", "%2F")
        settings_ = ConnectionSettings.from_dsn(f"postgresql://u@/db?{query}")
    kwargs = settings_.connect_kwargs()
    assert kwargs["sslmode"] == ("disable" if expected_local else "require"), params
    # What libpq gets says the same thing as what was analysed.
    seen = conninfo_to_dict(make_conninfo("", **{k: v for k, v in kwargs.items() if k != "password"}))
    assert seen["host"] == params["host"] and seen.get("hostaddr") == params.get("hostaddr")


@pytest.mark.parametrize("field", ["dbname", "user", "application_name"])
@pytest.mark.parametrize("hostile", ["postgresql://db.example.com/db?sslmode=disable",
                                     "host=db.example.com sslmode=disable", "' host=db.example.com '"])
def test_a_connection_string_inside_another_value_changes_nothing(field, hostile):
    # psycopg hands libpq one quoted string: no value is expanded into parameters.
    kwargs = ConnectionSettings(host="127.0.0.1", **{field: hostile}).connect_kwargs()
    seen = conninfo_to_dict(make_conninfo("", **kwargs))
    assert seen["host"] == "127.0.0.1" and seen["sslmode"] == "disable" and seen[field] == hostile
    remote = ConnectionSettings(host="db.example.com", **{field: hostile}).connect_kwargs()
    assert conninfo_to_dict(make_conninfo("", **remote))["sslmode"] == "require"
