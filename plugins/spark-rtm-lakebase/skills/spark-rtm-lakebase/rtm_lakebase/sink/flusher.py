"""The one thread per writer that writes: full batches in order, and the buffer once it is too old.

``add()`` (called by ``process()``) buffers a row and hands the buffer over
when ``max_batch_rows`` keys are in it; at most one batch waits while another
is being written, then ``add()`` waits (back-pressure). The thread also hands
the buffer over itself once its oldest row is ``max_dwell_ms`` old, so the tail
is written even when no row follows (under real-time mode ``close()`` only
comes at the end of a long batch).

Any error of the thread, whatever it is, is kept and raised by the next
``add()`` and by ``finish()``; after it nothing more is written. It is logged
at ERROR at once, and ``on_failure(error)``, if given, is called at once and
every half second until ``finish()``/``abort()`` (the writer uses it to make
the Python worker report the error now: :mod:`~rtm_lakebase.sink.interrupt`). ``finish()``
writes what is left and raises if any row was not written; ``abort()`` (the
task failed) drops what is not yet being written and stops the flush in flight
at once through ``cancel`` (no retry, no backoff sleep, the running statement
cancelled); that flush is abandoned, not reported as a failed flush. No row
leaves the buffer without being written or an exception being raised.

The time comes from ``clock`` (``time.monotonic`` by default), so tests run the
dwell timer on a clock of their own; :meth:`Flusher.wake` makes the thread look
at the clock again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from rtm_lakebase.sink.buffer import RowBuffer
from rtm_lakebase.sink.errors import SinkError

log = logging.getLogger(__name__)


class Flusher:
    def __init__(self, buffer: RowBuffer, write: Callable[[list[tuple], bool], None],
                 max_batch_rows: int, max_dwell_ms: int, name: str,
                 on_failure: Callable[[BaseException], None] | None = None,
                 cancel: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.buffer = buffer
        self._write = write  # write(batch, by_timer); raises on failure
        self._cancel = cancel  # stops the write in flight (called by abort() from another thread)
        self._clock = clock
        self._max_rows = max_batch_rows
        self._dwell = max_dwell_ms / 1000
        self._lock = threading.Lock()  # taken directly on the hot path (a Condition adds a Python call)
        self._cond = threading.Condition(self._lock)
        self._queue: deque[tuple[list[tuple], bool]] = deque()  # [0] is being written
        self._stopping = False
        self._aborted = False
        self._writing = False  # a write is in flight
        self.error: BaseException | None = None
        self._on_failure = on_failure
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def add(self, values: tuple) -> None:
        """Buffer one row; hand the buffer over when full. Raises the thread's error, if any."""
        with self._lock:
            if self.error is not None:
                raise self.error
            buffer = self.buffer
            size = buffer.add(values)
            if buffer.oldest is None:  # the first row since the last hand-over: start the dwell timer
                buffer.oldest = self._clock()
                self._cond.notify_all()
            if size >= self._max_rows:
                self._seal(by_timer=False)
                while len(self._queue) > 1 and self.error is None and self._thread.is_alive():
                    self._cond.wait()
                if self.error is not None:
                    raise self.error

    def finish(self) -> None:
        """Write what is left, stop the thread, raise its error (or a SinkError if rows were left)."""
        with self._cond:
            if self.error is None:
                self._seal(by_timer=False)
            self._stopping = True
            self._cond.notify_all()
        self._join()
        with self._cond:
            if self.error is not None:
                raise self.error
            left = sum(len(batch) for batch, _ in self._queue) + len(self.buffer)
            if left:
                raise SinkError(f"{left} row(s) were not written: the flusher thread stopped early")

    def abort(self) -> bool:
        """The task failed: drop rows not yet written (Spark replays them), stop the write in flight, stop.

        Returns True when a flush was in flight and was abandoned.
        """
        with self._cond:
            while len(self._queue) > 1:
                self._queue.pop()
            self.buffer.clear()
            self._stopping = self._aborted = True
            in_flight = self._writing
            self._cond.notify_all()
        if in_flight and self._cancel is not None:
            self._cancel()
        self._join()
        with self._cond:
            self._queue.clear()
        return in_flight

    def wake(self) -> None:
        """Make the thread look at the clock again (a test moved its clock)."""
        with self._cond:
            self._cond.notify_all()

    def _join(self) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _seal(self, by_timer: bool) -> None:
        """Hand the buffer over to the thread (caller holds the lock)."""
        if len(self.buffer):
            self._queue.append((self.buffer.take(), by_timer))
            self._cond.notify_all()
        else:
            self.buffer.oldest = None

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # never die silently: raised by add()/finish()
            with self._cond:
                if self.error is None:
                    self.error = exc
                aborted = self._aborted
                self._cond.notify_all()
            if aborted:  # the task failed first: the writer's close() says so; this flush just stopped
                log.debug("postgres sink: flush stopped after the task failed: %s", exc)
                return
            log.error("postgres sink: flush failed; nothing more is written, and the task fails with this error "
                      "(within seconds on the fast foreach path; under stock foreach when this batch ends): %s",
                      exc)
            if self._on_failure is not None:
                self._report(exc)

    def _report(self, exc: BaseException) -> None:
        """Call on_failure now and every 0.5 s until finish()/abort() (the receiver may defer it)."""
        while True:
            try:
                self._on_failure(exc)
            except Exception as hook_error:  # never let reporting hide the flush's own error
                log.warning("postgres sink: could not report the failed flush at once: %r", hook_error)
                return
            with self._cond:
                if not self._stopping:
                    self._cond.wait(0.5)
                if self._stopping:
                    return

    def _loop(self) -> None:
        dwell = self._dwell
        with self._cond:
            while True:
                if not self._queue:
                    oldest = self.buffer.oldest
                    if oldest is not None and dwell and self._clock() >= oldest + dwell:
                        self._seal(by_timer=True)
                        continue
                    if self._stopping:
                        return
                    timeout = oldest + dwell - self._clock() if oldest is not None and dwell else None
                    self._cond.wait(timeout)
                    continue
                if self._aborted:
                    return
                batch, by_timer = self._queue[0]
                self._writing = True
                self._cond.release()
                try:
                    self._write(batch, by_timer)
                finally:
                    self._cond.acquire()
                    self._writing = False
                self._queue.popleft()
                self._cond.notify_all()
