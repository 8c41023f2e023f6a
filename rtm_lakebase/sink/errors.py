"""The sink's exceptions, and what retrying can change about a failure.

What a failure leads to is data, not code: ``outcomes.json`` beside this module
is one ordered table of rules (SQLSTATE class or code, phase ``connect`` or
``write``, outcome), read by this writer and by the JVM sink alike, so both
engines treat every failure the same way (``tests/sink_parity`` checks it).
:func:`outcome_rule` finds the rule for one failure; :func:`classify` maps its
outcome to the :class:`Failure` the rest of the sink acts on:

- ``reconnect`` → ``CONNECTION``: close, back off, connect again, retry;
- ``retry`` → ``CONFLICT``: back off, retry on the same connection;
- ``bad_row`` → ``ROW``, or ``TIMEOUT`` for a rule ``bounded_by_flush_time``
  (lock and statement timeouts): not retried; the flush is searched for the
  row that causes it (within the failed flush's own time for ``TIMEOUT``) and
  a :class:`BadRowError` names it;
- ``permanent`` → ``PERMANENT``: not retried, a :class:`SinkError`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

import psycopg


class SinkError(RuntimeError):
    """The sink could not write; the message says why (secrets redacted); ``sqlstate`` is the server's code, if any."""

    def __init__(self, message: str = "", sqlstate: str | None = None):
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self):
        return (type(self), (str(self), self.sqlstate))


class SinkConnectionError(SinkError):
    """Could not connect, or the connection kept failing past the retry budget."""


class FlushAbandoned(SinkError):
    """The task failed while this flush ran; the flush was stopped unwritten (Spark replays its rows)."""


class BadRowError(SinkError):
    """A row was rejected; ``key`` and ``column`` name it. Nothing of its flush was written."""

    def __init__(self, message: str, key: Mapping[str, Any] | None = None,
                 column: str | None = None, sqlstate: str | None = None):
        super().__init__(message, sqlstate)
        self.key = dict(key) if key is not None else None
        self.column = column

    def __reduce__(self):
        return (BadRowError, (str(self), self.key, self.column, self.sqlstate))


class Failure(enum.Enum):
    CONNECTION = "connection lost"
    CONFLICT = "lock conflict"
    TIMEOUT = "statement timeout"
    ROW = "bad row"
    PERMANENT = "permanent"


_FAILURE_OF = {"reconnect": Failure.CONNECTION, "retry": Failure.CONFLICT, "bad_row": Failure.ROW,
               "permanent": Failure.PERMANENT}


@lru_cache(maxsize=1)
def outcome_table() -> dict[str, Any]:
    """``outcomes.json``: the rules both sinks apply, first match wins."""
    return json.loads(resources.files(__package__).joinpath("outcomes.json").read_text(encoding="utf-8"))


def outcome_rule(sqlstate: str | None, phase: str, client: str | None = None, message: str = "") -> dict[str, Any]:
    """The first rule of the table that matches; the default outcome when none does."""
    table, text = outcome_table(), message.lower()
    for rule in table["rules"]:
        if rule["phase"] not in ("any", phase):
            continue
        code = rule.get("sqlstate")
        if code is not None and not (sqlstate and (sqlstate == code or (len(code) == 2 and sqlstate[:2] == code))):
            continue
        if "client" in rule and (sqlstate or client != rule["client"]):
            continue
        if "message" in rule and not any(fragment in text for fragment in rule["message"]):
            continue
        return rule
    return {"phase": "any", "outcome": table["default"], "why": "no rule matches"}


def client_kind(exc: BaseException) -> str | None:
    """What the driver detected, for a failure without a SQLSTATE (the table's ``clients``)."""
    if isinstance(exc, psycopg.Error):
        if getattr(exc, "sqlstate", None):
            return None
        if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError)):
            return "connection_lost"
        if isinstance(exc, (psycopg.DataError, psycopg.ProgrammingError)):
            return "cannot_encode"  # psycopg could not send a value ("cannot adapt", mixed types)
        return None
    if isinstance(exc, (TypeError, ValueError, OverflowError, ArithmeticError)):
        return "cannot_encode"  # raised while psycopg turned a Python value into bytes
    return None


def classify(exc: BaseException, connecting: bool = False) -> Failure:
    """What retrying can change about ``exc`` (raised by a connect when ``connecting``)."""
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, psycopg.Error) else None
    rule = outcome_rule(sqlstate, "connect" if connecting else "write", client_kind(exc), str(exc))
    if rule["outcome"] == "bad_row" and rule.get("bounded_by_flush_time"):
        return Failure.TIMEOUT
    return _FAILURE_OF[rule["outcome"]]
