"""What a worker knows about queues between claims: which have limits, which are paused.

A worker claims ahead (prefetch) only from queues without limits — from a limited queue a claim
must be a start — and gives back the buffered claims of a queue paused since, at its next poll
(SPEC §7). Both need the declarations, read from the store at most once per poll interval
(on the injected monotonic clock), never once per claim.
"""

from __future__ import annotations

import threading

from ..clock import Monotonic
from ..store.base import Store
from .batching import QueueStates

__all__ = ["QueueWatch"]


class QueueWatch:
    """The queue declarations a worker claims by, read at most every ``refresh_s`` seconds."""

    def __init__(self, store: Store, *, refresh_s: float, monotonic: Monotonic) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._read_at: float | None = None
        self._states = QueueStates(frozenset(), frozenset())

    def __call__(self) -> QueueStates:
        now = self._monotonic()
        with self._lock:
            if self._read_at is not None and now - self._read_at < self._refresh_s:
                return self._states
        queues = self._store.list_queues()  # may raise: the feeder then claims nothing limited
        states = QueueStates(
            limited=frozenset(queue.name for queue in queues if queue.limited),
            paused=frozenset(queue.name for queue in queues if queue.paused),
            rate_windows_ms=frozenset(
                rate.per_ms
                for queue in queues
                for rate in (queue.rate, queue.partition_rate)
                if rate is not None and not queue.paused
            ),
        )
        with self._lock:
            self._states, self._read_at = states, now
        return states

    @property
    def last(self) -> QueueStates:
        """The declarations as last read (no store read)."""
        with self._lock:
            return self._states
