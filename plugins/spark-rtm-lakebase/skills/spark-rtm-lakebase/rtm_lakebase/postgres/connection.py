"""Postgres/Lakebase connection settings for executors: DSN parsing, safe defaults, secret redaction.

``ConnectionSettings`` holds everything a Spark task needs to open its own
connection: host, port, database, user, and a password kept in a
:class:`Secret` (or a ``password_provider`` callable that runs on the executor,
e.g. to fetch a fresh OAuth token). What the settings leave out, libpq takes
from the executor's environment as psycopg users expect (``PGHOST``,
``PGPORT``, ``PGDATABASE``, ``PGUSER``, ``PGSSLMODE``, ``PGPASSWORD``,
``.pgpass``, a service file).

Defaults: ``sslmode=require`` unless every place the connection can go is a
Unix socket or a numeric loopback address (see :mod:`rtm_lakebase.postgres.tls`),
an explicit ``connect_timeout`` (``PGCONNECT_TIMEOUT``, else 10 s: psycopg's
own default waits 130 s), an ``application_name``, and TCP keepalives so a
dead peer is noticed.

No message written here carries the password, a token, or any value of a
connection string libpq could not parse; bad settings raise
:class:`ConnectionSettingsError` (a ``ValueError``) with a one-line reason.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from rtm_lakebase.postgres.tls import (
    SSLMODES,
    ConnectionSettingsError,
    TlsChoice,
    choose_sslmode,
    targets,
    warn_if_weak,
)

log = logging.getLogger(__name__)

REDACTED = "***"
DEFAULT_CONNECT_TIMEOUT = 10


class Secret:
    """A string that prints as ``***``; ``reveal()`` returns the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        if isinstance(value, Secret):
            value = value.reveal()
        self._value = str(value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(("Secret", self._value))

    def __bool__(self) -> bool:
        return bool(self._value)

    def __getstate__(self) -> dict[str, str]:
        return {"value": self._value}

    def __setstate__(self, state: Mapping[str, str]) -> None:
        self._value = state["value"]


#: libpq parameters that hold a secret: never shown, redacted from every message.
SECRET_PARAMS = ("password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key")

_PASSWORD_PATTERNS = (
    re.compile(r"((?:password|oauth_client_secret|scram_client_key|scram_server_key)\s*=\s*)"
               r"('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE),
    re.compile(r"(postgres(?:ql)?://[^:/@\s]+:)([^@\s]+)(@)", re.IGNORECASE),
)


def redact(text: object, *secrets: str | Secret | None) -> str:
    """``text`` as a string with ``password=…``, URL passwords and each given secret replaced by ``***``."""
    result = str(text)
    for secret in secrets:
        value = secret.reveal() if isinstance(secret, Secret) else secret
        if value:
            result = result.replace(value, REDACTED)
    result = _PASSWORD_PATTERNS[0].sub(lambda m: m.group(1) + REDACTED, result)
    result = _PASSWORD_PATTERNS[1].sub(lambda m: m.group(1) + REDACTED + m.group(3), result)
    return result


# libpq's parse errors quote the text around the problem, which may be part of a
# password: each known message becomes a fixed description, anything else a generic one.
_PARSE_PROBLEMS = (
    ("missing \"=\" after", "a word without '=' (a value with spaces must be quoted: key='a b')"),
    ("invalid connection option", "an unknown parameter name (a misspelt key, or an unquoted value "
                                   "with a space or '=' in it)"),
    ("unterminated quoted string", "a quoted value without its closing quote"),
    ("unexpected spaces found", "a space in the URL (percent-encode it as %20)"),
    ("invalid percent-encoded token", "a '%' not followed by two hex digits in the URL (write % as %25)"),
    ("forbidden value %00", "an encoded NUL (%00) in the URL"),
    ("invalid URI query parameter", "an unknown parameter in the URL's query string"),
    ("missing key/value separator", "a query parameter without '=' in the URL"),
    ("matching \"]\"", "an IPv6 address without its closing ']' in the URL"),
    ("IPv6 host address may not be empty", "an empty IPv6 address '[]' in the URL"),
    ("unexpected character", "an unexpected character after the host in the URL"),
)


def _parse_problem(libpq_message: str) -> str:
    for marker, problem in _PARSE_PROBLEMS:
        if marker in libpq_message:
            return problem
    return "libpq rejects its syntax"


def parse_dsn(dsn: str) -> dict[str, str]:
    """A URL or ``key=value`` connection string as a dict; errors never quote the string."""
    if not isinstance(dsn, str):
        raise ConnectionSettingsError(f"a connection string must be a str, not {type(dsn).__name__}")
    if "\x00" in dsn:
        raise ConnectionSettingsError("cannot parse the connection string: it contains a NUL character")
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        problem = _parse_problem(str(exc))
    else:
        if not _password_split_url(dsn):
            return parts
        problem = "an '@' after the host part of the URL (a '/' or '?' in a password must be percent-encoded)"
    raise ConnectionSettingsError(
        f"cannot parse the connection string: {problem} (its text is not shown: it may hold a password)")


def _password_split_url(dsn: str) -> bool:
    """``postgresql://u:pa/ss@h/db`` parses as host ``u`` and database ``ss@h/db``: refuse it."""
    scheme, sep, rest = dsn.strip().partition("://")
    if not sep or scheme.lower() not in ("postgres", "postgresql"):
        return False
    path = rest.split("?", 1)[0]
    authority, _, tail = path.partition("/")
    return "@" not in authority and "@" in tail


def _libpq_keywords() -> frozenset[str]:
    return frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())


_INT_FIELDS = ("connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count")
_TEXT_FIELDS = ("host", "hostaddr", "dbname", "user", "application_name")


def _as_int(name: str, value: object, minimum: int) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ConnectionSettingsError(f"{name} must be a whole number of at least {minimum}")
    return number


def _check_text(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ConnectionSettingsError(f"{name} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise ConnectionSettingsError(f"{name} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConnectionSettingsError(f"{name} is not encodable as UTF-8") from None


def _check_port(value: object) -> int | str | None:
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536:
        return value
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else "x"
    parts = text.split(",")
    if all(p == "" or (p.isascii() and p.isdigit() and 0 < int(p) < 65536) for p in parts) and any(parts):
        return int(text) if len(parts) == 1 else text
    raise ConnectionSettingsError("port must be a number from 1 to 65535, or a comma-separated list of them")


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how a sink task connects. Build it with :meth:`from_dsn` or by parts.

    ``None`` means "not set here": libpq then uses the executor's environment
    (``PGHOST``, ``PGPORT``, ...) or its own default.
    """

    host: str | None = None
    port: int | str | None = None
    dbname: str | None = None
    user: str | None = None
    password: Secret | None = field(default=None)
    #: Called on the executor each time a connection is opened, to get the password/token
    #: (must be picklable, e.g. a module-level function). Wins over ``password`` when set.
    password_provider: Callable[[], str] | None = None
    #: ``None`` → ``PGSSLMODE`` if set, else ``require``, or ``disable`` for a local server only.
    sslmode: str | None = None
    #: ``None`` → ``PGCONNECT_TIMEOUT`` if set, else 10 s.
    connect_timeout: int | None = None
    application_name: str = "spark-foreach-sink"
    keepalives_idle: int = 30
    keepalives_interval: int = 10
    keepalives_count: int = 3
    #: Extra libpq parameters (e.g. ``{"options": "-c statement_timeout=30000"}``).
    extra: Mapping[str, str] = field(default_factory=dict)
    #: The numeric address to connect to (``host`` then only names it for TLS and .pgpass).
    hostaddr: str | None = None

    def __post_init__(self) -> None:
        password = self.password
        if password is not None and not isinstance(password, Secret):
            if not isinstance(password, str):
                raise ConnectionSettingsError(f"password must be a str or Secret, not {type(password).__name__}")
            password = Secret(password)
            object.__setattr__(self, "password", password)
        if password is not None:
            _check_text("password", password.reveal())
        for name in _TEXT_FIELDS:
            _check_text(name, getattr(self, name))
        object.__setattr__(self, "port", _check_port(self.port))
        if self.sslmode is not None and self.sslmode not in SSLMODES:
            raise ConnectionSettingsError(f"sslmode must be one of {', '.join(SSLMODES)}")
        if self.connect_timeout is not None:  # 0 would mean "wait forever" in libpq
            object.__setattr__(self, "connect_timeout", _as_int("connect_timeout", self.connect_timeout, 1))
        for name in _INT_FIELDS[1:]:
            object.__setattr__(self, name, _as_int(name, getattr(self, name), 1))
        if self.password_provider is not None and not callable(self.password_provider):
            raise ConnectionSettingsError("password_provider must be callable (a module-level function)")
        object.__setattr__(self, "extra", self._checked_extra(self.extra))
        given = {key: str(getattr(self, key)) for key in ("host", "hostaddr", "port") if getattr(self, key)}
        targets(given)  # host, hostaddr and port lists that libpq cannot pair: refused here, on the driver

    @staticmethod
    def _checked_extra(extra: Mapping[str, str]) -> dict[str, str]:
        if not isinstance(extra, Mapping):
            raise ConnectionSettingsError("extra must be a mapping of libpq parameter names to strings")
        own = {f.name for f in fields(ConnectionSettings)} | {"keepalives"}
        known = _libpq_keywords()
        checked: dict[str, str] = {}
        for key, value in extra.items():
            if key == "password":
                raise ConnectionSettingsError("pass the password as password=Secret(...) or password_provider, "
                                              "not in extra")
            if key in own:
                raise ConnectionSettingsError(f"extra must not set {key!r}: it is a field of ConnectionSettings")
            if not isinstance(key, str) or key not in known:
                raise ConnectionSettingsError("extra holds a name that is not a libpq connection parameter")
            _check_text(f"extra[{key!r}]", value.reveal() if isinstance(value, Secret) else value)
            checked[key] = Secret(value) if key in SECRET_PARAMS else value  # e.g. sslpassword
        return checked

    @classmethod
    def from_dsn(cls, dsn: str, **overrides: Any) -> ConnectionSettings:
        """Parse a URL (``postgresql://u:p@h:5432/db``) or ``key=value`` DSN; ``overrides`` win."""
        parts = parse_dsn(dsn)
        own = {f.name for f in fields(cls)} - {"extra", "password_provider"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for key, value in parts.items():
            if key == "keepalives":  # always on
                continue
            if key in own:
                kwargs[key] = value
            else:
                extra[key] = value
        if extra:
            kwargs["extra"] = extra
        kwargs.update(overrides)
        return cls(**kwargs)

    # -- what libpq will get ---------------------------------------------------
    def _timeout(self) -> int:
        if self.connect_timeout is not None:
            return self.connect_timeout
        from_env = os.environ.get("PGCONNECT_TIMEOUT")
        if from_env:
            return _as_int("PGCONNECT_TIMEOUT", from_env, 1)
        return DEFAULT_CONNECT_TIMEOUT

    def _params(self) -> dict[str, Any]:
        """Every parameter set here (no password); libpq fills the rest from the environment."""
        params: dict[str, Any] = {
            "host": self.host, "hostaddr": self.hostaddr, "port": self.port, "dbname": self.dbname,
            "user": self.user, "sslmode": self.sslmode, "connect_timeout": self._timeout(),
            "application_name": self.application_name, "keepalives": 1,
            "keepalives_idle": self.keepalives_idle, "keepalives_interval": self.keepalives_interval,
            "keepalives_count": self.keepalives_count,
        }
        params.update((key, value) for key, value in self.extra.items() if not isinstance(value, Secret))
        return {key: value for key, value in params.items() if value is not None}

    def tls(self) -> TlsChoice:
        """The sslmode this connection will use, why, and where it goes (reads the environment)."""
        return choose_sslmode(self._params())

    @property
    def effective_sslmode(self) -> str:
        return self.tls().sslmode

    def resolve_password(self) -> str | None:
        if self.password_provider is not None:
            value = self.password_provider()
            if not isinstance(value, str) or not value:
                raise ConnectionSettingsError(
                    f"password_provider returned {type(value).__name__}, not a non-empty str")
            _check_text("the password_provider's password", value)
            return value
        return self.password.reveal() if self.password else None

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` (contains the secret: never log this)."""
        params = self._params()
        choice = choose_sslmode(params)
        warn_if_weak(choice)
        params["sslmode"] = choice.sslmode
        params.update((key, value.reveal()) for key, value in self.extra.items() if isinstance(value, Secret))
        password = self.resolve_password()
        if password:
            params["password"] = password
        return params

    def describe(self) -> str:
        """A loggable one-liner without the secret (values from the environment included)."""
        try:
            choice = self.tls()
            where, sslmode = ",".join(choice.targets), choice.sslmode
        except ConnectionSettingsError as exc:
            where, sslmode = self.host, f"(invalid: {exc})"
        try:
            timeout: object = self._timeout()
        except ConnectionSettingsError:
            timeout = "(invalid PGCONNECT_TIMEOUT)"
        port = self.port or os.environ.get("PGPORT") or 5432
        dbname = self.dbname or os.environ.get("PGDATABASE") or "(default)"
        user = self.user or os.environ.get("PGUSER") or "(default)"
        return (f"host={where} port={port} dbname={dbname} user={user} sslmode={sslmode} "
                f"connect_timeout={timeout} application_name={self.application_name}")

    def __repr__(self) -> str:
        provider = "set" if self.password_provider else None
        try:
            sslmode = self.effective_sslmode
        except ConnectionSettingsError:
            sslmode = "(invalid)"
        hostaddr = f", hostaddr={self.hostaddr!r}" if self.hostaddr else ""
        return (f"ConnectionSettings(host={self.host!r}{hostaddr}, port={self.port!r}, dbname={self.dbname!r}, "
                f"user={self.user!r}, password={REDACTED if self.password else None!r}, "
                f"password_provider={provider!r}, sslmode={sslmode!r}, "
                f"connect_timeout={self.connect_timeout!r}, application_name={self.application_name!r})")

    __str__ = __repr__


def as_connection_settings(value: ConnectionSettings | str) -> ConnectionSettings:
    """Accept settings or a DSN string."""
    if isinstance(value, ConnectionSettings):
        return value
    if isinstance(value, str):
        return ConnectionSettings.from_dsn(value)
    raise TypeError(f"expected ConnectionSettings or a DSN string, not {type(value).__name__}")


def _tls_hint(message: str, choice: TlsChoice) -> str:
    if choice.source == "default" and "does not support SSL" in message:
        return (f" (sslmode=require was chosen because {','.join(choice.targets)} is not a Unix socket "
                "or a numeric loopback address; connect to 127.0.0.1, or set sslmode yourself)")
    return ""


def connect(settings: ConnectionSettings, autocommit: bool = False) -> psycopg.Connection:
    """One connection attempt; errors come back redacted, without the driver's exception chained.

    Raises ``psycopg.OperationalError`` when the server could not be reached or refused
    the login, :class:`ConnectionSettingsError` when the settings themselves cannot work.
    """
    kwargs = settings.connect_kwargs()
    secrets = [kwargs[key] for key in SECRET_PARAMS if kwargs.get(key)]
    log.debug("connecting: %s", settings.describe())
    try:
        return psycopg.connect(autocommit=autocommit, **kwargs)
    except psycopg.ProgrammingError as exc:  # refused on the client side, before any connection
        raise ConnectionSettingsError(
            f"libpq refused the connection parameters: {_parse_problem(str(exc))}") from None
    except psycopg.Error as exc:
        message = redact(exc, *secrets).strip()
        message += _tls_hint(message, settings.tls())
        error = type(exc)(message) if isinstance(exc, psycopg.OperationalError) else psycopg.OperationalError(message)
        raise error from None
