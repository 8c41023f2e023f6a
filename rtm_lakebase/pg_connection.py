"""Postgres/Lakebase connection settings for executors: DSN parsing, safe defaults, secret redaction.

``ConnectionSettings`` holds everything a Spark task needs to open its own
connection: host, port, database, user, and a password kept in a
:class:`Secret` (or a ``password_provider`` callable that runs on the executor,
e.g. to fetch a fresh OAuth token). Defaults: ``sslmode=require`` unless the
host is local, an explicit ``connect_timeout`` (psycopg's own default waits
130 s), an ``application_name``, and TCP keepalives so a dead peer is noticed.

The password never appears in ``repr``/``str`` of these objects, in log lines
written here, or in error messages passed through :func:`redact`.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import psycopg
from psycopg.conninfo import conninfo_to_dict

log = logging.getLogger(__name__)

REDACTED = "***"
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", ""})


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


def is_local_host(host: str | None) -> bool:
    """True for loopback names/addresses and Unix-socket folders (no TLS needed there)."""
    if host is None:
        return True
    hosts = [h.strip() for h in str(host).split(",")]
    return all(h in LOCAL_HOSTS or h.startswith("/") or h.startswith("127.") for h in hosts)


_PASSWORD_PATTERNS = (
    re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE),
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


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how a sink task connects. Build it with :meth:`from_dsn` or by parts."""

    host: str = "localhost"
    port: int = 5432
    dbname: str = "databricks_postgres"
    user: str | None = None
    password: Secret | None = field(default=None)
    #: Called on the executor in ``open()`` to get the password/token (must be picklable,
    #: e.g. a module-level function). Wins over ``password`` when set.
    password_provider: Callable[[], str] | None = None
    #: ``None`` → ``require`` for remote hosts, ``disable`` for local ones.
    sslmode: str | None = None
    connect_timeout: int = 10
    application_name: str = "spark-foreach-sink"
    keepalives_idle: int = 30
    keepalives_interval: int = 10
    keepalives_count: int = 3
    #: Extra libpq parameters (e.g. ``{"options": "-c statement_timeout=30000"}``).
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.password is not None and not isinstance(self.password, Secret):
            object.__setattr__(self, "password", Secret(self.password))
        if self.connect_timeout < 1:
            raise ValueError("connect_timeout must be at least 1 second (0 means wait forever in libpq)")

    @classmethod
    def from_dsn(cls, dsn: str, **overrides: Any) -> "ConnectionSettings":
        """Parse a URL (``postgresql://u:p@h:5432/db``) or ``key=value`` DSN; ``overrides`` win."""
        try:
            parts = conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"cannot parse the DSN: {redact(exc, dsn)}") from None
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for key, value in parts.items():
            if key in ("keepalives",):
                continue
            if key in known:
                kwargs[key] = value
            else:
                extra[key] = str(value)
        for key in ("port", "connect_timeout", "keepalives_idle", "keepalives_interval", "keepalives_count"):
            if key in kwargs:
                kwargs[key] = int(kwargs[key])
        if extra:
            kwargs["extra"] = extra
        kwargs.update(overrides)
        return cls(**kwargs)

    @property
    def effective_sslmode(self) -> str:
        if self.sslmode:
            return self.sslmode
        return "disable" if is_local_host(self.host) else "require"

    def resolve_password(self) -> str | None:
        if self.password_provider is not None:
            return self.password_provider()
        return self.password.reveal() if self.password else None

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``psycopg.connect`` (contains the secret: never log this)."""
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "dbname": self.dbname,
            "sslmode": self.effective_sslmode,
            "connect_timeout": self.connect_timeout,
            "application_name": self.application_name,
            "keepalives": 1,
            "keepalives_idle": self.keepalives_idle,
            "keepalives_interval": self.keepalives_interval,
            "keepalives_count": self.keepalives_count,
        }
        if self.user:
            kwargs["user"] = self.user
        password = self.resolve_password()
        if password:
            kwargs["password"] = password
        kwargs.update(self.extra)
        return kwargs

    def describe(self) -> str:
        """A loggable one-liner without the secret."""
        return (f"host={self.host} port={self.port} dbname={self.dbname} user={self.user} "
                f"sslmode={self.effective_sslmode} connect_timeout={self.connect_timeout} "
                f"application_name={self.application_name}")

    def __repr__(self) -> str:
        provider = "set" if self.password_provider else None
        return (f"ConnectionSettings(host={self.host!r}, port={self.port}, dbname={self.dbname!r}, "
                f"user={self.user!r}, password={REDACTED if self.password else None!r}, "
                f"password_provider={provider!r}, sslmode={self.effective_sslmode!r}, "
                f"connect_timeout={self.connect_timeout}, application_name={self.application_name!r})")

    __str__ = __repr__


def as_connection_settings(value: "ConnectionSettings | str") -> ConnectionSettings:
    """Accept settings or a DSN string."""
    if isinstance(value, ConnectionSettings):
        return value
    if isinstance(value, str):
        return ConnectionSettings.from_dsn(value)
    raise TypeError(f"expected ConnectionSettings or a DSN string, not {type(value).__name__}")


#: SQLSTATE classes/codes that will not get better by retrying the login.
_PERMANENT_LOGIN_SQLSTATES = ("28",  "3D000", "42501")
_PERMANENT_LOGIN_TEXT = ("password authentication failed", "no pg_hba.conf entry",
                         "does not exist", "authentication failed", "permission denied")


def is_permanent_connect_error(exc: BaseException) -> bool:
    """Wrong credentials, unknown database/role: fail at once instead of retrying."""
    state = getattr(exc, "sqlstate", None) or ""
    if state and any(state.startswith(prefix) for prefix in _PERMANENT_LOGIN_SQLSTATES):
        return True
    text = str(exc).lower()
    return any(marker in text for marker in _PERMANENT_LOGIN_TEXT)


def connect(settings: ConnectionSettings, autocommit: bool = False) -> psycopg.Connection:
    """One connection attempt; errors come back with the secret redacted (``psycopg.OperationalError``)."""
    kwargs = settings.connect_kwargs()
    log.debug("connecting: %s", settings.describe())
    try:
        return psycopg.connect(autocommit=autocommit, **kwargs)
    except psycopg.Error as exc:
        message = redact(exc, kwargs.get("password"))
        error = type(exc)(message) if isinstance(exc, psycopg.OperationalError) else psycopg.OperationalError(message)
        raise error from None
