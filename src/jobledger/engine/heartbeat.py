"""Heartbeat drivers: what calls "renew the lease" every ``renew_interval_ms`` while a handler runs.

The runtime never sleeps or starts timers itself; it asks a :class:`HeartbeatDriver` to call a
``beat`` function periodically and to stop when the handler is done (the reference injects
``setIntervalFn``/``clearIntervalFn`` for the same reason).

* :class:`ThreadHeartbeat` — production: one daemon thread per running handler, waiting on an
  :class:`threading.Event` with a timeout (a monotonic wait, not a wall-clock read).
* :class:`ManualHeartbeat` — tests: nothing happens until you call :meth:`ManualHeartbeat.tick`,
  typically right after advancing a :class:`~jobledger.testing.FakeClock`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Heartbeat", "HeartbeatDriver", "ManualHeartbeat", "ThreadHeartbeat"]

logger = logging.getLogger("jobledger.heartbeat")

Beat = Callable[[], None]


@runtime_checkable
class Heartbeat(Protocol):
    """A started heartbeat; :meth:`stop` is idempotent and never raises."""

    def stop(self) -> None: ...


@runtime_checkable
class HeartbeatDriver(Protocol):
    """Starts a heartbeat that calls ``beat`` every ``interval_ms`` until stopped."""

    def start(self, interval_ms: int, beat: Beat) -> Heartbeat: ...


class _ThreadBeat:
    def __init__(self, interval_ms: int, beat: Beat, name: str) -> None:
        self._stopped = threading.Event()
        self._interval_s = interval_ms / 1000
        self._beat = beat
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                self._beat()
            except Exception:  # a beat must never kill the heartbeat; the runtime records errors
                logger.exception("heartbeat beat failed")

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


class ThreadHeartbeat:
    """One daemon thread per heartbeat, beating every ``interval_ms`` of monotonic time."""

    def start(self, interval_ms: int, beat: Beat) -> Heartbeat:
        return _ThreadBeat(interval_ms, beat, name="jobledger-heartbeat")


class _ManualBeat:
    def __init__(self, owner: ManualHeartbeat, interval_ms: int, beat: Beat) -> None:
        self.owner = owner
        self.interval_ms = interval_ms
        self.beat = beat
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        self.owner._forget(self)


class ManualHeartbeat:
    """A heartbeat driver for tests: beats happen only when :meth:`tick` is called.

    >>> driver = ManualHeartbeat()
    >>> beats = []
    >>> hb = driver.start(1000, lambda: beats.append(1))
    >>> driver.tick()
    1
    >>> hb.stop(); driver.tick()
    0
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: list[_ManualBeat] = []
        self.started = 0
        self.stopped = 0
        self.intervals: list[int] = []

    @property
    def active(self) -> int:
        """How many heartbeats are running right now."""
        with self._lock:
            return len(self._active)

    def start(self, interval_ms: int, beat: Beat) -> Heartbeat:
        handle = _ManualBeat(self, interval_ms, beat)
        with self._lock:
            self._active.append(handle)
            self.started += 1
            self.intervals.append(interval_ms)
        return handle

    def _forget(self, handle: _ManualBeat) -> None:
        with self._lock:
            if handle in self._active:
                self._active.remove(handle)
                self.stopped += 1

    def tick(self) -> int:
        """Call every active beat once, in this thread; return how many were called."""
        with self._lock:
            due = list(self._active)
        for handle in due:
            if not handle.stopped:
                handle.beat()
        return len(due)
