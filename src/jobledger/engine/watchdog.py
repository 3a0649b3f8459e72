"""Handler time limits: one watchdog thread per runtime, however many attempts it watches.

A kind registered with ``timeout=`` gets at most that long per attempt. When the time is up the
attempt is failed as a retryable ``SCHEDULER_RUNTIME_TIMEOUT`` (retried after the kind's
backoff), its context is cancelled (an async handler's task is cancelled too) and its lease is
no longer renewed. A *sync* handler cannot be stopped from outside in Python: its thread runs on
until the function returns, and whatever it returns is discarded.

Deadlines are durations on the monotonic clock (like every wait in jobledger), so no wall-clock
read is involved; tests inject ``monotonic`` and call :meth:`Watchdog.check`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Watchdog"]

logger = logging.getLogger("jobledger.runtime")

Alarm = Callable[[], None]


class Watchdog:
    """Calls each alarm once its deadline passes, unless it was cancelled first."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic, thread: bool = True):
        self._monotonic = monotonic
        self._use_thread = thread
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, Alarm]] = []
        self._cancelled: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def watch(self, seconds: float, alarm: Alarm) -> int:
        """Call ``alarm`` after ``seconds``; returns a handle for :meth:`cancel`."""
        handle = next(self._ids)
        with self._changed:
            heapq.heappush(self._heap, (self._monotonic() + seconds, handle, alarm))
            if self._use_thread and self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="jobledger-watchdog", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return handle

    def cancel(self, handle: int) -> None:
        with self._changed:
            self._cancelled.add(handle)

    def check(self) -> int:
        """Fire every alarm that is due now; return how many fired."""
        due: list[Alarm] = []
        with self._changed:
            now = self._monotonic()
            while self._heap and self._heap[0][0] <= now:
                _, handle, alarm = heapq.heappop(self._heap)
                if handle in self._cancelled:
                    self._cancelled.discard(handle)
                else:
                    due.append(alarm)
        for alarm in due:
            try:
                alarm()
            except Exception:
                logger.exception("a handler time limit could not be enforced")
        return len(due)

    def _run(self) -> None:
        while True:
            with self._changed:
                if self._closed:
                    return
                while self._heap and self._heap[0][1] in self._cancelled:
                    self._cancelled.discard(heapq.heappop(self._heap)[1])
                wait = None if not self._heap else max(0.0, self._heap[0][0] - self._monotonic())
                if wait is None or wait > 0:
                    self._changed.wait(wait)
                    continue
            self.check()

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._heap.clear()
            self._changed.notify_all()
