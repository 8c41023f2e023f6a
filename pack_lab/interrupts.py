"""Turn SIGTERM/SIGHUP into an exception, so ``finally`` blocks clean up on every exit path.

Python raises :class:`KeyboardInterrupt` on Ctrl-C (SIGINT) but dies without
running ``finally`` on SIGTERM. :func:`interrupts_raise` installs handlers that
raise :class:`Interrupted` instead, in the main thread, for the duration of a
``with`` block. :func:`shielded` keeps a cleanup block from being cut short by
a second Ctrl-C: signals that arrive inside it are remembered and re-raised
when it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

#: Signals handled, and the exit code a shell reports for each (128 + number).
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """The process got SIGINT, SIGTERM or SIGHUP; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


_active = 0  # how many interrupts_raise() blocks are open


def reclaim() -> None:
    """Put this module's handlers back inside :func:`interrupts_raise` (a library replaced one).

    PySpark installs its own SIGINT handler when a SparkContext starts; it calls the JVM
    from inside the handler, which breaks a py4j call already in progress.
    """
    if _active and threading.current_thread() is threading.main_thread():
        for sig in HANDLED:
            signal.signal(sig, _raise)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Inside the block, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _active
    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    for sig in HANDLED:
        signal.signal(sig, _raise)
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def shielded(notice=None) -> Iterator[None]:
    """Run a cleanup block to its end; a signal inside it is raised once the block is done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def remember(signum: int, _frame: object) -> None:
        pending.append(signum)
        if notice is not None:
            notice(f"{signal.Signals(signum).name} received: finishing clean-up first")

    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    for sig in HANDLED:
        signal.signal(sig, remember)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if pending:
        raise Interrupted(pending[0])
