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

from ..contract import DEFAULT_QUEUE, is_safe_int, normalize_queue_name
from ..errors import InvalidArgument

__all__ = [
    "DEPTH_CAP",
    "MIN_RATE_WINDOW",
    "OccurrenceGate",
    "Queue",
    "QueueDepth",
    "Rate",
    "normalize_declaration",
]

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


# A queue's limits, by Python name, with their JSON (camelCase) keys.
QUEUE_LIMIT_KEYS: dict[str, str] = {
    "concurrency": "concurrency",
    "worker_concurrency": "workerConcurrency",
    "partition_concurrency": "partitionConcurrency",
    "rate": "rate",
    "partition_rate": "partitionRate",
}


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue's declared limits and pause state (see the module docstring).

    ``revision`` counts declarations (0: never declared, no limits); ``paused_at`` /
    ``paused_by`` / ``paused_reason`` say who paused it, when and why. ``sources`` says, per
    limit (``concurrency``, ``worker_concurrency``, ``partition_concurrency``, ``rate``,
    ``partition_rate``), where its value came from: ``"operator"`` (``jobledger queue set``:
    it stands until an operator changes it), ``"declaration"`` (``app.queue`` in code) or
    ``"default"`` (nobody set it: no limit) — SPEC §14. Not part of equality.
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
    sources: dict[str, str] = field(default_factory=dict, compare=False)

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
            "sources": {QUEUE_LIMIT_KEYS[name]: source for name, source in self.sources.items()},
        }


def _limit(value: object, field: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not is_safe_int(value) or value < 1:
        raise InvalidArgument(
            f"{field} must be None or an integer of at least 1", details={"field": field}
        )
    return value


def _rate(value: object, field: str) -> Rate | None:
    if value is None:
        return None
    if not isinstance(value, Rate):
        raise InvalidArgument(f"{field} must be None or a jobledger.Rate", details={"field": field})
    return value


def normalize_declaration(
    *,
    name: object,
    concurrency: object = None,
    worker_concurrency: object = None,
    partition_concurrency: object = None,
    rate: object = None,
    partition_rate: object = None,
) -> Queue:
    """A queue declaration, validated (``SCHEDULER_INVALID_ARGUMENT`` naming the field)."""
    return Queue(
        name=normalize_queue_name(name, "name"),
        concurrency=_limit(concurrency, "concurrency"),
        worker_concurrency=_limit(worker_concurrency, "worker_concurrency"),
        partition_concurrency=_limit(partition_concurrency, "partition_concurrency"),
        rate=_rate(rate, "rate"),
        partition_rate=_rate(partition_rate, "partition_rate"),
    )


# The most rows a per-queue count reads before it stops and says "at least" (bounded reads).
DEPTH_CAP = 10_000


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """What a queue holds now (:meth:`~jobledger.Store.queue_depths`).

    ``ready`` rows are due and claimable; ``waiting`` ones are not due yet, or due and not yet
    staged by a claim; ``held`` ones are due but their partition is at its limit (SPEC §7);
    ``running`` counts claimed, unsettled occurrences; ``blocked`` ones wait for parents.
    Occurrences of a disabled job are in none of them. Every count stops at a cap:
    ``capped`` names the counts that reached it (the true number is at least that).
    ``rate_claims`` is the claims taken in the queue's current rate window, which ends at
    ``rate_window_end`` (``None`` without a ``rate``).
    """

    queue: Queue
    ready: int = 0
    waiting: int = 0
    held: int = 0
    running: int = 0
    blocked: int = 0
    capped: frozenset[str] = frozenset()
    rate_claims: int = 0
    rate_window_end: int | None = None

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def depth(self) -> int:
        """Queued work: ready, waiting and held rows."""
        return self.ready + self.waiting + self.held

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue.to_json(),
            "depth": self.depth,
            "ready": self.ready,
            "waiting": self.waiting,
            "held": self.held,
            "running": self.running,
            "blocked": self.blocked,
            "capped": sorted(self.capped),
            "rateClaims": self.rate_claims,
            "rateWindowEnd": self.rate_window_end,
        }


@dataclass(frozen=True, slots=True)
class OccurrenceGate:
    """Where a queued occurrence stands in the claim lane (``Store.occurrence_gate``).

    ``gate`` is ``"ready"``, ``"waiting"`` or ``"held"`` for a queued or retrying occurrence,
    else ``None``. For one with a partition: that partition's running occurrences
    (``partition_running``, capped at the cap), and its rate window's claims and the instant held
    rows are woken at (``partition_wake_at``: the next window, when the window ran out).
    """

    occurrence_id: str
    queue: str
    partition: str | None
    gate: str | None
    runnable: bool
    partition_running: int = 0
    partition_rate_claims: int = 0
    partition_wake_at: int | None = None
