"""Where a libpq connection really goes, and the ``sslmode`` that follows from it.

libpq names the server in several places, and later ones only fill what
earlier ones left out: the connection parameters (``host``, ``hostaddr``,
``port``, each possibly a comma-separated list), then the entry of a
connection service file named by ``service``/``PGSERVICE``, then the
environment (``PGHOST``, ``PGHOSTADDR``, ``PGPORT``, ``PGSSLMODE``), then the
compiled-in default (a Unix socket). For each host in the list, a non-empty
``hostaddr`` is the address connected to; otherwise ``host`` is a Unix-socket
folder (``/...`` or ``@...``) or a name/address looked up by the system.

The rule: TLS may be off by default only when EVERY place the connection can
go is a Unix socket or a numeric loopback address (``127.0.0.0/8``, ``::1``);
a service that no readable file defines is refused rather than guessed.
A host *name* is never trusted to be local, not even ``localhost`` or
``127.0.0.1.example.com``. An ``sslmode`` the user chose (parameter, service
file or ``PGSSLMODE``) wins; one weaker than ``require`` for a server that is
not local is logged once per process as a warning.
"""

from __future__ import annotations

import configparser
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
WEAK_SSLMODES = frozenset({"disable", "allow", "prefer"})

#: The parameters that say where the connection goes, with the variables that fill them.
ENV_FALLBACK = {"host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "sslmode": "PGSSLMODE"}

_warned: set[tuple[str, tuple[str, ...]]] = set()


class ConnectionSettingsError(ValueError):
    """Settings that cannot work. The message names the problem, never a value that could be secret."""


@dataclass(frozen=True)
class TlsChoice:
    sslmode: str
    #: Where the mode came from: ``settings``, ``service file``, ``PGSSLMODE`` or ``default``.
    source: str
    #: True when every target is a Unix socket or a numeric loopback address.
    local: bool
    #: Where the connection can go, for messages (``unix:/tmp``, ``127.0.0.1``, ``db.example.com``).
    targets: tuple[str, ...]


def is_loopback_address(text: str) -> bool:
    """True for a numeric loopback address only (``127.x.x.x``, ``::1``, ``::ffff:127.x.x.x``)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False  # a name, even "localhost": the resolver decides where it goes
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def is_unix_socket(host: str) -> bool:
    """libpq's test: an absolute path, or ``@`` for Linux's abstract namespace."""
    return host.startswith("@") or os.path.isabs(host)


def read_service(name: str, environ: Mapping[str, str]) -> dict[str, str] | None:
    """The parameters of service ``name`` from the files libpq reads, or None if not found here."""
    files = [environ.get("PGSERVICEFILE") or str(Path("~/.pg_service.conf").expanduser())]
    if environ.get("PGSYSCONFDIR"):
        files.append(os.path.join(environ["PGSYSCONFDIR"], "pg_service.conf"))
    for path in files:
        parser = configparser.ConfigParser(interpolation=None, strict=False, delimiters=("=",),
                                           comment_prefixes=("#",), inline_comment_prefixes=None)
        try:
            with open(path, encoding="utf-8") as handle:
                parser.read_file(handle)
        except (OSError, UnicodeError, configparser.Error):
            continue
        if parser.has_section(name):
            return {key.strip().lower(): value.strip() for key, value in parser.items(name)}
    return None


def resolve(params: Mapping[str, object], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``host``, ``hostaddr``, ``port``, ``sslmode`` as libpq will use them (absent ones stay absent)."""
    environ = os.environ if environ is None else environ
    found = {key: str(params[key]) for key in ENV_FALLBACK if params.get(key) is not None}
    service = params.get("service") or environ.get("PGSERVICE")
    if service:
        entries = read_service(str(service), environ)
        if entries is None:  # libpq may know a compiled-in file we cannot see: refuse to guess its host
            raise ConnectionSettingsError(
                "the service named by service=/PGSERVICE is not in PGSERVICEFILE, ~/.pg_service.conf or "
                "PGSYSCONFDIR/pg_service.conf, so where it connects cannot be checked: point PGSERVICEFILE "
                "or PGSYSCONFDIR at its file, or give host and sslmode instead")
        else:
            for key in ENV_FALLBACK:
                if key in entries and key not in found:
                    found[key] = entries[key]
                    if key == "sslmode":
                        found["__sslmode_from_service__"] = "1"
    for key, variable in ENV_FALLBACK.items():
        if key not in found and environ.get(variable) is not None:
            found[key] = environ[variable]
            if key == "sslmode":
                found["__sslmode_from_env__"] = "1"
    return found


def targets(resolved: Mapping[str, str]) -> tuple[tuple[str, bool], ...]:
    """Each place the connection can go, as (description, is_local)."""
    hosts = resolved.get("host", "").split(",")
    addrs = resolved["hostaddr"].split(",") if resolved.get("hostaddr") else []
    if addrs and len(hosts) == 1 and not hosts[0]:
        hosts = [""] * len(addrs)
    if addrs and len(addrs) != len(hosts):
        raise ConnectionSettingsError(
            f"{len(hosts)} host names but {len(addrs)} hostaddr values: give one hostaddr per host "
            "(or leave one empty to look that host up)")
    ports = resolved.get("port", "").split(",")
    if len(ports) > 1 and len(ports) != len(hosts):
        raise ConnectionSettingsError(f"{len(ports)} ports for {len(hosts)} hosts: give one port, or one per host")
    result = []
    for i, host in enumerate(hosts):
        addr = addrs[i] if addrs else ""
        if addr:
            result.append((addr, is_loopback_address(addr)))
        elif host and is_unix_socket(host):
            result.append((f"unix:{host}", True))
        elif host:
            result.append((host, is_loopback_address(host)))
        elif os.name == "nt":  # libpq's default host: localhost on Windows, a Unix socket elsewhere
            result.append(("localhost", False))
        else:
            result.append(("unix:(default socket)", True))
    return tuple(result)


def choose_sslmode(params: Mapping[str, object], environ: Mapping[str, str] | None = None) -> TlsChoice:
    """The sslmode to pass: the user's if they chose one, else ``disable`` only for a local server."""
    resolved = resolve(params, environ)
    places = targets(resolved)
    local = all(is_local for _, is_local in places)
    names = tuple(name for name, _ in places)
    if "sslmode" in resolved:
        mode = resolved["sslmode"]
        source = ("PGSSLMODE" if "__sslmode_from_env__" in resolved
                  else "service file" if "__sslmode_from_service__" in resolved else "settings")
        if mode not in SSLMODES:
            raise ConnectionSettingsError(f"sslmode from {source} must be one of {', '.join(SSLMODES)}")
        return TlsChoice(mode, source, local, names)
    return TlsChoice("disable" if local else "require", "default", local, names)


def warn_if_weak(choice: TlsChoice) -> None:
    """Log once per process when a weak sslmode was chosen for a server that is not local."""
    if choice.local or choice.sslmode not in WEAK_SSLMODES:
        return
    key = (choice.sslmode, choice.targets)
    if key in _warned:
        return
    _warned.add(key)
    log.warning("sslmode=%s (from %s) for a server that is not a Unix socket or a loopback address (%s): "
                "the connection, password included, may travel unencrypted; use require or verify-full",
                choice.sslmode, choice.source, ",".join(choice.targets))
