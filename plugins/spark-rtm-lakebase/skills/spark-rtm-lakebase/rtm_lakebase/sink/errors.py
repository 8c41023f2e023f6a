"""The sink's exceptions, and what retrying can change about a failure.

Every failure of a write falls in one class (:func:`classify`):

- ``CONNECTION`` — the connection was lost or the server restarted (no
  SQLSTATE, class ``08``, ``57P01``-``57P03``, ``25006`` after a fail-over):
  reconnect, back off, retry;
- ``CONFLICT`` — deadlock, serialization failure, lock timeout (``40P01``,
  ``40001``, ``55P03``): retry on the same connection, back off;
- ``TIMEOUT`` — ``statement_timeout`` or a cancel (``57014``): permanent, the
  flush is searched for one row that causes it within the flush's own time;
- ``ROW`` — the data of some row (class ``22``, ``23``, ``21000``, program
  limits ``54xxx`` such as an index row too big, and values psycopg cannot
  send): permanent, the row is named by a :class:`BadRowError`;
- ``PERMANENT`` — everything else (missing table or column, no privilege,
  wrong password, disk full): permanent, a :class:`SinkError`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import psycopg


class SinkError(RuntimeError):
    """The sink could not write; the message says why (secrets redacted)."""


class SinkConnectionError(SinkError):
    """Could not connect, or the connection kept failing past the retry budget."""


class BadRowError(SinkError):
    """A row was rejected; ``key`` and ``column`` name it. Nothing of its flush was written."""

    def __init__(self, message: str, key: Mapping[str, Any] | None = None,
                 column: str | None = None, sqlstate: str | None = None):
        super().__init__(message)
        self.key = dict(key) if key is not None else None
        self.column = column
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (BadRowError, (str(self), self.key, self.column, self.sqlstate))


class Failure(enum.Enum):
    CONNECTION = "connection lost"
    CONFLICT = "lock conflict"
    TIMEOUT = "statement timeout"
    ROW = "bad row"
    PERMANENT = "permanent"


_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03", "25006", "40003")
_CONFLICT_STATES = ("40001", "40P01", "55P03")
_ROW_STATES = ("22", "23", "21000", "54")
_LOGIN_STATES = ("28", "3D000", "42501")
_LOGIN_TEXT = ("password authentication failed", "no pg_hba.conf entry", "does not exist",
               "authentication failed", "permission denied")


def classify(exc: BaseException, connecting: bool = False) -> Failure:
    """What retrying can change about ``exc`` (raised by a connect when ``connecting``)."""
    if not isinstance(exc, psycopg.Error):
        # Raised while psycopg turned a Python value into bytes (bad text, mixed types...).
        if isinstance(exc, (TypeError, ValueError, OverflowError, ArithmeticError)):
            return Failure.ROW
        return Failure.PERMANENT
    state = getattr(exc, "sqlstate", None) or ""
    if connecting and (state.startswith(_LOGIN_STATES)
                       or any(text in str(exc).lower() for text in _LOGIN_TEXT)):
        return Failure.PERMANENT
    if state.startswith(_CONNECTION_STATES) or (connecting and state == "53300"):
        return Failure.CONNECTION
    if state.startswith(_CONFLICT_STATES):
        return Failure.CONFLICT
    if state == "57014":
        return Failure.TIMEOUT
    if state.startswith(_ROW_STATES):
        return Failure.ROW
    if not state:
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return Failure.CONNECTION  # detected by the client: the connection is gone
        if isinstance(exc, (psycopg.DataError, psycopg.ProgrammingError)):
            return Failure.ROW  # psycopg could not send a value ("cannot adapt", mixed types)
    return Failure.PERMANENT
