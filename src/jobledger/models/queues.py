"""Queues (SPEC §7): a declaration's limits and a queue's pause state.

A queue nobody declared has no limits and is not paused. ``concurrency`` bounds the queue's
running occurrences across every worker; ``worker_concurrency`` those of one worker (owner id);
``partition_concurrency`` those of one (queue, partition); ``rate`` / ``partition_rate`` the
claims per window (windows aligned to the epoch). ``None``: no limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..contract import DEFAULT_QUEUE, is_safe_int
from ..errors import InvalidArgument

__all__ = ["MIN_RATE_WINDOW", "Queue", "Rate"]

MIN_RATE_WINDOW = timedelta(seconds=1)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``limit`` claims (first claims and reclaims) per window ``per`` (≥ 1 s, whole
    milliseconds); windows start at multiples of ``per`` since the Unix epoch."""

    limit: int
    per: timedelta
    per_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if type(self.limit) is not int or not is_safe_int(self.limit) or self.limit < 1:
            raise InvalidArgument("a Rate's limit must be an integer of at least 1")
        if not isinstance(self.per, timedelta) or self.per < MIN_RATE_WINDOW:
            raise InvalidArgument("a Rate's per must be a timedelta of at least 1 second")
        millis, remainder = divmod(self.per, _ONE_MS)
        if remainder or not is_safe_int(millis):
            raise InvalidArgument("a Rate's per must be a whole number of milliseconds")
        object.__setattr__(self, "per_ms", int(millis))

    @classmethod
    def from_ms(cls, limit: int, per_ms: int) -> Rate:
        return cls(limit, timedelta(milliseconds=per_ms))

    def to_json(self) -> dict[str, Any]:
        return {"limit": self.limit, "perMs": self.per_ms}


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue's declared limits and pause state (see the module docstring).

    ``revision`` counts declarations (0: never declared, no limits); ``paused_at`` /
    ``paused_by`` / ``paused_reason`` say who paused it, when and why.
    """

    name: str = DEFAULT_QUEUE
    concurrency: int | None = None
    worker_concurrency: int | None = None
    partition_concurrency: int | None = None
    rate: Rate | None = None
    partition_rate: Rate | None = None
    paused: bool = False
    paused_reason: str | None = None
    paused_at: int | None = None
    paused_by: str | None = None
    revision: int = 0
    created_at: int | None = None
    updated_at: int | None = None

    @property
    def limited(self) -> bool:
        """Any limit is declared: workers claim from it only for free slots (no prefetch)."""
        return any(
            limit is not None
            for limit in (
                self.concurrency,
                self.worker_concurrency,
                self.partition_concurrency,
                self.rate,
                self.partition_rate,
            )
        )

    @property
    def partition_limited(self) -> bool:
        """Partitions of this queue are admitted one slot or token at a time."""
        return self.partition_concurrency is not None or self.partition_rate is not None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``--json``, the dashboard, audit records): camelCase keys."""
        return {
            "name": self.name,
            "concurrency": self.concurrency,
            "workerConcurrency": self.worker_concurrency,
            "partitionConcurrency": self.partition_concurrency,
            "rate": None if self.rate is None else self.rate.to_json(),
            "partitionRate": None if self.partition_rate is None else self.partition_rate.to_json(),
            "paused": self.paused,
            "pausedReason": self.paused_reason,
            "pausedAt": self.paused_at,
            "pausedBy": self.paused_by,
            "revision": self.revision,
        }
