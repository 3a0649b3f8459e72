"""Retry backoff policies: pure functions of (attempt, random source) → delay in milliseconds.

A policy never reads the clock. The runtime asks it for a delay after a retryable failure and
schedules the retry at ``now + delay`` using its own injected clock, so backoff is testable
without sleeping. The reference implementation retries immediately; jobledger does not hammer a
failing dependency: the default is :data:`DEFAULT_BACKOFF` (1 s, doubling, ±20 % jitter, capped
at 10 minutes).

Bounds of :meth:`ExponentialBackoff.delay_ms` for attempt ``n`` (1 = the first attempt failed)::

    raw   = min(cap, base * factor ** (n - 1))
    delay ∈ [raw * (1 - jitter), min(cap, raw * (1 + jitter))]      (rounded to whole ms)

so a delay is never above ``cap``, and with ``jitter=0`` it is exactly ``raw``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from ..contract import is_safe_int
from ..durations import choose_ms, ms_from_timedelta
from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_BACKOFF",
    "BackoffPolicy",
    "ExponentialBackoff",
    "FixedBackoff",
]


@runtime_checkable
class BackoffPolicy(Protocol):
    """How long to wait before the next attempt after attempt ``attempt`` failed."""

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        """The delay in ms; ``attempt`` is 1-based, ``rng`` supplies the jitter."""
        ...


@dataclass(frozen=True, slots=True, init=False)
class ExponentialBackoff:
    """``base * factor ** (attempt - 1)``, capped at ``cap``, with symmetric relative jitter."""

    base_ms: int
    factor: float
    cap_ms: int
    jitter: float

    def __init__(
        self,
        base: timedelta = timedelta(seconds=1),
        factor: float = 2.0,
        cap: timedelta = timedelta(minutes=10),
        jitter: float = 0.2,
    ) -> None:
        base_ms = ms_from_timedelta(base, "base")
        cap_ms = ms_from_timedelta(cap, "cap")
        if cap_ms < base_ms:
            raise InvalidArgument("cap must not be shorter than base")
        if type(factor) not in (int, float) or not math.isfinite(factor) or factor < 1:
            raise InvalidArgument("factor must be a finite number ≥ 1")
        if type(jitter) not in (int, float) or not 0 <= jitter <= 1:
            raise InvalidArgument("jitter must be a number between 0 and 1")
        object.__setattr__(self, "base_ms", base_ms)
        object.__setattr__(self, "factor", float(factor))
        object.__setattr__(self, "cap_ms", cap_ms)
        object.__setattr__(self, "jitter", float(jitter))

    def raw_delay_ms(self, attempt: int) -> int:
        """The delay before jitter: ``min(cap, base * factor ** (attempt - 1))``."""
        if not is_safe_int(attempt) or attempt < 1:
            raise InvalidArgument("attempt must be a positive integer")
        exponent = attempt - 1
        # Compare in log space so a large attempt cannot overflow a float.
        if self.base_ms == 0:
            return 0
        if self.factor > 1 and exponent * math.log(self.factor) >= math.log(
            self.cap_ms / self.base_ms
        ):
            return self.cap_ms
        return min(self.cap_ms, round(self.base_ms * self.factor**exponent))

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        raw = self.raw_delay_ms(attempt)
        if self.jitter == 0 or raw == 0:
            return raw
        scale = rng.uniform(1 - self.jitter, 1 + self.jitter)
        return max(0, min(self.cap_ms, round(raw * scale)))


@dataclass(frozen=True, slots=True, init=False)
class FixedBackoff:
    """The same delay after every attempt: ``FixedBackoff(timedelta(seconds=30))``, or
    ``FixedBackoff(delay_ms=30_000)``; ``FixedBackoff(timedelta(0))`` retries immediately."""

    delay: int  # milliseconds

    def __init__(self, delay: timedelta | None = None, *, delay_ms: int | None = None) -> None:
        millis = choose_ms(delay, delay_ms, "delay")
        if millis is None:
            raise InvalidArgument("FixedBackoff needs delay (a timedelta) or delay_ms")
        object.__setattr__(self, "delay", millis)

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        if not is_safe_int(attempt) or attempt < 1:
            raise InvalidArgument("attempt must be a positive integer")
        return self.delay


DEFAULT_BACKOFF = ExponentialBackoff()
