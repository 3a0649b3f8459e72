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

from .contract import MAX_SAFE_INTEGER, is_safe_int
from .errors import InvalidArgument

__all__ = [
    "DEFAULT_BACKOFF",
    "BackoffPolicy",
    "ExponentialBackoff",
    "FixedBackoff",
    "duration_ms",
]


def duration_ms(value: int | timedelta, field: str) -> int:
    """A non-negative duration given as whole milliseconds or a :class:`timedelta`."""
    if isinstance(value, timedelta):
        millis = value // timedelta(milliseconds=1)
    elif is_safe_int(value):
        millis = value
    else:
        raise InvalidArgument(f"{field} must be a timedelta or a whole number of milliseconds")
    if not 0 <= millis <= MAX_SAFE_INTEGER:
        raise InvalidArgument(f"{field} must not be negative")
    return millis


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
        base: int | timedelta = timedelta(seconds=1),
        factor: float = 2.0,
        cap: int | timedelta = timedelta(minutes=10),
        jitter: float = 0.2,
    ) -> None:
        base_ms = duration_ms(base, "base")
        cap_ms = duration_ms(cap, "cap")
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
    """The same delay after every attempt (``FixedBackoff(0)`` retries immediately)."""

    delay: int

    def __init__(self, delay: int | timedelta) -> None:
        object.__setattr__(self, "delay", duration_ms(delay, "delay"))

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        if not is_safe_int(attempt) or attempt < 1:
            raise InvalidArgument("attempt must be a positive integer")
        return self.delay


DEFAULT_BACKOFF = ExponentialBackoff()
