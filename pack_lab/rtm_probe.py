"""Run a streaming query briefly and classify the outcome: accepted, or rejected with which error class.

Real-time mode reports problems in two places. Output-mode, trigger, SQL-conf
and sink problems raise from ``DataStreamWriter.start()``; source, operator and
task-slot problems only surface later, when the long batch is planned or
scheduled, through ``query.exception()``. Both arrive wrapped: a query that
dies carries ``[STREAM_FAILED]`` around the real cause. The helpers here dig
out the innermost meaningful error class so tests and docs can name it::

    outcome = run_and_classify(lambda: writer.start(), feed=lambda q: source.add(rows),
                               until=lambda: len(read_rows(out)) >= 3, timeout=30)
    outcome.status        # "accepted" or "rejected"
    outcome.error_class   # e.g. "STREAMING_REAL_TIME_MODE.OUTPUT_MODE_NOT_SUPPORTED"
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Error classes that only wrap the real cause; skipped when naming an outcome.
WRAPPER_CLASSES = frozenset({"STREAM_FAILED"})

_CLASS_IN_MESSAGE = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)*)\]")


def _java_condition(java_exc: Any) -> str | None:
    for getter in ("getCondition", "getErrorClass"):
        try:
            value = getattr(java_exc, getter)()
        except Exception:  # not a SparkThrowable, or py4j could not call it
            continue
        if value:
            return str(value)
    return None


def error_classes(exc: BaseException | None) -> list[str]:
    """Every error class found on ``exc``: its own, its Java cause chain's, then its message's.

    Order is outermost first; duplicates are dropped.
    """
    if exc is None:
        return []
    found: list[str] = []

    def note(value: str | None) -> None:
        if value and value not in found:
            found.append(value)

    getter = getattr(exc, "getCondition", None)
    if callable(getter):
        try:
            note(getter())
        except Exception:
            pass
    # Walk the JVM cause chain of a py4j-backed PySpark exception.
    java_exc = getattr(exc, "_origin", None) or getattr(exc, "java_exception", None)
    seen = 0
    while java_exc is not None and seen < 20:
        note(_java_condition(java_exc))
        try:
            java_exc = java_exc.getCause()
        except Exception:
            break
        seen += 1
    for match in _CLASS_IN_MESSAGE.finditer(str(exc)):
        note(match.group(1))
    return found


# --8<-- [start:classify]
def error_class(exc: BaseException | None) -> str | None:
    """The error class that names the cause (wrappers such as ``STREAM_FAILED`` skipped)."""
    classes = error_classes(exc)
    for name in classes:
        if name not in WRAPPER_CLASSES:
            return name
    return classes[0] if classes else None
# --8<-- [end:classify]


@dataclass
class Outcome:
    """What happened to one probed query."""

    status: str  # "accepted" or "rejected"
    error_class: str | None = None
    stage: str | None = None  # "build", "start" or "run" for a rejection
    exception_type: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``"accepted"`` or the error class: what the support matrix records."""
        return "accepted" if self.status == "accepted" else (self.error_class or "rejected")


def _rejected(exc: BaseException, stage: str) -> Outcome:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Outcome("rejected", error_class(exc), stage, type(exc).__name__, message[:2000])


def run_and_classify(
    start: Callable[[], Any],
    feed: Callable[[Any], None] | None = None,
    until: Callable[[], bool] | None = None,
    timeout: float = 30.0,
    poll: float = 0.2,
    build: Callable[[], Any] | None = None,
) -> Outcome:
    """Start a query, feed it, and wait until ``until()`` holds, the query dies, or ``timeout``.

    - ``build()`` (optional) runs first; an exception there is a ``"build"`` rejection
      (e.g. ``trigger(realTime=True)`` raising ``PySparkValueError``). Its result is
      passed to ``start``; without ``build``, ``start()`` takes no argument.
    - ``start`` returns a ``StreamingQuery``; an exception is a ``"start"`` rejection.
    - ``feed(query)`` adds input once the query runs.
    - ``until()`` is the success condition (e.g. expected rows arrived). Without it
      the query is accepted if it is still alive with no exception at the deadline.

    The query is always stopped before returning. An accepted outcome whose
    ``until`` never held is reported as ``status="timeout"``.
    """
    if build is not None:
        try:
            built = build()
        except Exception as exc:
            return _rejected(exc, "build")
        start_call: Callable[[], Any] = lambda: start(built)
    else:
        start_call = start
    try:
        query = start_call()
    except Exception as exc:
        return _rejected(exc, "start")
    try:
        if feed is not None:
            feed(query)
        deadline = time.monotonic() + timeout
        while True:
            if not query.isActive:
                error = query.exception()
                if error is not None:
                    return _rejected(error, "run")
                return Outcome("timeout", message="query stopped without an error")
            if until is not None and until():
                return Outcome("accepted")
            if time.monotonic() > deadline:
                if until is None:
                    return Outcome("accepted")
                return Outcome("timeout", message=f"condition not met within {timeout:.0f} s")
            time.sleep(poll)
    finally:
        try:
            query.stop()
        except Exception:
            pass
