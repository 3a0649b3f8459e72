"""The one place jobledger reads the wall clock.

A clock is any zero-argument callable returning epoch milliseconds as an ``int``. Stores,
runtimes and workers take one as an argument; tests pass :class:`jobledger.testing.FakeClock`.

Durations measured inside one process (how fresh a claim is, how long a handler ran, when a
housekeeping task is due) use a *monotonic* clock instead — seconds as a ``float`` that never
jump with the wall clock — injected the same way (:data:`Monotonic`), so the branches that
depend on elapsed time are tested without sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "Monotonic", "monotonic_clock", "system_clock", "utc_now"]

Clock = Callable[[], int]
Monotonic = Callable[[], float]


def system_clock() -> int:
    """Milliseconds since the Unix epoch, from the operating system's real-time clock."""
    return time.time_ns() // 1_000_000


def monotonic_clock() -> float:
    """Seconds from an arbitrary start that only moves forward (for elapsed time, never dates)."""
    return time.monotonic()


def utc_now(clock: Clock) -> datetime:
    """The clock's reading as an aware UTC datetime (for people, never for comparisons)."""
    return datetime.fromtimestamp(clock() / 1000, tz=UTC)
