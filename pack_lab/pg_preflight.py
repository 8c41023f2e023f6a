"""Check a Postgres connection string before anything else starts, in one secret-free line.

:func:`check_postgres` parses the DSN and opens (then closes) one connection.
Any failure becomes :class:`PostgresCheckFailed`, whose message names the
cause (cannot be parsed, host unknown, connection refused, timed out,
authentication failed, database missing, ...) and the non-secret parts of the
target (host, port, database, user), never the password and never the DSN
text itself: libpq's own parse errors quote pieces of the string, so they are
not passed on.
"""

from __future__ import annotations

import uuid
from typing import Any

#: Seconds the check waits for a server before calling it unreachable.
CHECK_TIMEOUT_S = 10


class PostgresCheckFailed(RuntimeError):
    """The connection string is unusable; the message is one line with no secret in it."""


def _target(parts: dict[str, Any]) -> str:
    host = parts.get("host") or parts.get("hostaddr") or "the default socket"
    port = parts.get("port") or "5432"
    where = f"{host}:{port}" if not str(host).startswith("/") else f"socket {host}"
    return f"{where} (database {parts.get('dbname') or 'default'}, user {parts.get('user') or 'default'})"


def parse_dsn(dsn: str, name: str = "PG_DSN") -> dict[str, Any]:
    """The DSN's parts; :class:`PostgresCheckFailed` (without quoting it) when libpq cannot parse it."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn)
    except Exception:  # libpq's message quotes parts of the string: never pass it on
        raise PostgresCheckFailed(
            f"{name} is not a valid libpq connection string or postgresql:// URL "
            "(a value with spaces or quotes needs single quotes, e.g. password='a b')") from None


def describe_connect_error(exc: BaseException, parts: dict[str, Any], name: str = "PG_DSN") -> str:
    """One line for a failed connection: the cause and the target, never the password."""
    state = getattr(exc, "sqlstate", None) or ""
    text = str(exc).lower()
    target = _target(parts)
    if "role" in text and "does not exist" in text:
        cause = "the user does not exist"
    elif state.startswith("28") or "password authentication failed" in text \
            or "authentication failed" in text or "no password supplied" in text:
        cause = "authentication failed (wrong user or password)"
    elif state == "3D000" or ("database" in text and "does not exist" in text):
        cause = "the database does not exist"
    elif "no pg_hba.conf entry" in text:
        cause = "the server does not accept this client (pg_hba.conf)"
    elif "could not translate host name" in text or "name or service not known" in text \
            or "nodename nor servname" in text:
        cause = "the host name cannot be resolved"
    elif "connection refused" in text:
        cause = "connection refused (is Postgres running and listening on that port?)"
    elif "timeout" in text or "timed out" in text:
        cause = f"no answer within {CHECK_TIMEOUT_S} s"
    elif "ssl" in text or "certificate" in text:
        cause = "the TLS handshake failed (check sslmode and the server's certificate)"
    elif "too many connections" in text or state == "53300":
        cause = "the server has no free connection slots"
    else:
        cause = f"{type(exc).__name__}{f' (SQLSTATE {state})' if state else ''}"
    return f"cannot connect with {name} to {target}: {cause}"


def check_postgres(dsn: str, name: str = "PG_DSN", can_create: bool = False) -> None:
    """Parse ``dsn`` and open one connection; raise :class:`PostgresCheckFailed` on any failure.

    ``can_create``: also check that the user may create a table in its current schema
    (a ``CREATE TABLE`` inside a transaction that is rolled back: nothing is left).
    """
    import psycopg

    parts = parse_dsn(dsn, name)
    try:
        timeout = int(parts.get("connect_timeout") or CHECK_TIMEOUT_S)
    except ValueError:
        raise PostgresCheckFailed(f"{name} has a connect_timeout that is not a whole number") from None
    timeout = min(max(timeout, 1), CHECK_TIMEOUT_S)
    try:
        conn = psycopg.connect(dsn, connect_timeout=timeout, autocommit=True)
    except Exception as exc:  # psycopg.Error, and anything a driver or the OS raises
        raise PostgresCheckFailed(describe_connect_error(exc, parts, name)) from None
    with conn:
        try:
            conn.execute("SELECT 1")
            if can_create:
                from psycopg import sql

                probe = sql.Identifier(f"rtm_preflight_{uuid.uuid4().hex[:12]}")
                with conn.transaction(force_rollback=True):
                    conn.execute(sql.SQL("CREATE TABLE {} (id int)").format(probe))
        except Exception as exc:
            state = getattr(exc, "sqlstate", None)
            raise PostgresCheckFailed(
                f"the user in {name} cannot create a table in its current schema on {_target(parts)}"
                f"{f' (SQLSTATE {state})' if state else ''}: grant it CREATE on the schema "
                "(or set search_path to one it may use)") from None
