"""The one place jobledger reads the wall clock.

A clock is any zero-argument callable returning epoch milliseconds as an ``int``. Stores,
runtimes and workers take one as an argument; tests pass :class:`jobledger.testing.FakeClock`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "system_clock", "utc_now"]

Clock = Callable[[], int]


def system_clock() -> int:
    """Milliseconds since the Unix epoch, from the operating system's real-time clock."""
    return time.time_ns() // 1_000_000


def utc_now(clock: Clock) -> datetime:
    """The clock's reading as an aware UTC datetime (for people, never for comparisons)."""
    return datetime.fromtimestamp(clock() / 1000, tz=UTC)
