"""Make a Python worker report a failed flush at once, instead of when its long batch ends.

Inside a Spark Python worker the writer runs on the worker's main thread, which
spends a quiet stream blocked reading the next rows from Spark. When the
flusher thread gives up on a flush, :meth:`WorkerInterrupt.fire` sends SIGINT
to that main thread; the handler installed by ``open()`` raises the flush's
error there, so PySpark's foreach code calls ``close(error)`` and the worker
writes the error back to Spark and exits. Spark's stock ``PythonForeachWriter``
keeps that error until the batch ends; the pack's fast foreach path
(:mod:`rtm_lakebase.foreach`) watches for it and fails the task within seconds.

The handler raises only while the main thread is outside the sink's modules (reading
rows, or in the user's code): inside ``process()`` the writer raises the error
itself, and the flusher fires again every half second until ``close()``.
Outside a Spark task, or off the main thread, nothing is installed and the
error is raised by the next ``process()`` or ``close()`` as before. A SIGINT
that is not ours goes to the handler that was there before.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

_PACKAGE = __name__.rpartition(".")[0] + "."  # "rtm_lakebase.sink."


def in_spark_task() -> bool:
    """True inside a Spark Python worker's task (PySpark set its TaskContext)."""
    context = sys.modules.get("pyspark.taskcontext")
    return context is not None and context.TaskContext.get() is not None


class WorkerInterrupt:
    """SIGINT handler on the main thread for one open writer; :meth:`remove` restores the previous one."""

    def __init__(self) -> None:
        self._main = threading.main_thread().ident
        self._error: BaseException | None = None
        self._armed = True
        self._previous = signal.signal(signal.SIGINT, self._handle)

    @classmethod
    def install(cls) -> WorkerInterrupt | None:
        """A handler when called on the main thread of a Spark task, else None."""
        if threading.current_thread() is not threading.main_thread() or not in_spark_task():
            return None
        try:
            return cls()
        except (ValueError, OSError):  # signals unavailable here (not the main interpreter...)
            return None

    def fire(self, error: BaseException) -> None:
        """Called by the flusher thread (repeatedly) once a flush failed for good."""
        if self._armed:
            self._error = error
            signal.pthread_kill(self._main, signal.SIGINT)

    def remove(self) -> None:
        """Disarm and restore the previous handler (a signal still pending is dropped)."""
        self._armed = False
        previous = self._previous
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        error = self._error
        if error is None:  # not ours: behave as before
            previous = self._previous
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                raise KeyboardInterrupt
            return
        if not self._armed or _inside_package(frame):
            return  # closing, or process() is running and raises it itself (fired again in 0.5 s)
        self._armed = False
        raise error.with_traceback(None)  # its traceback is the flusher thread's, not this one


def _inside_package(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(_PACKAGE):
            return True
        frame = frame.f_back
    return False
