"""Every worker setting, defined once.

:class:`WorkerOptions` is the one place a worker's settings are declared, validated and
defaulted. :class:`~jobledger.Worker`, :meth:`App.worker <jobledger.App.worker>`,
:meth:`App.run_worker <jobledger.App.run_worker>` and ``jobledger worker`` all take exactly
these fields (the CLI has one flag per field), so no layer can offer a different subset.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from ..contract import (
    MAX_BATCH_SIZE,
    MAX_LEASE_MS,
    is_safe_int,
    normalize_identifier,
    normalize_queue_name,
)
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument

__all__ = [
    "DEFAULT_GRACE_PERIOD",
    "DEFAULT_LEASE",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_STUCK_GRACE",
    "MAX_CONCURRENCY",
    "LeaseOptions",
    "WorkerOptions",
]

DEFAULT_LEASE = timedelta(seconds=60)
DEFAULT_POLL_INTERVAL = timedelta(seconds=1)
DEFAULT_GRACE_PERIOD = timedelta(seconds=30)
# How long every slot may be stuck in a handler past its time limit before a worker gives up.
DEFAULT_STUCK_GRACE = timedelta(minutes=5)
DEFAULT_PLAN_INTERVAL = timedelta(seconds=60)
DEFAULT_WORKER_HEARTBEAT = timedelta(seconds=10)
MIN_LEASE = timedelta(seconds=1)
DEFAULT_LEASE_MS = DEFAULT_LEASE // timedelta(milliseconds=1)
MIN_LEASE_MS = MIN_LEASE // timedelta(milliseconds=1)


def default_renew_interval_ms(lease_ms: int) -> int:
    """How often held leases are renewed when not set: a third of the lease (at least 250 ms),
    so two renewals can fail before a lease runs out."""
    return max(250, lease_ms // 3)


# Every slot is a thread, and the claims a worker holds (slots + prefetch) are claimed at most
# MAX_BATCH_SIZE per transaction: beyond this a worker should be several processes.
MAX_CONCURRENCY = MAX_BATCH_SIZE
MAX_PREFETCH = 10 * MAX_BATCH_SIZE
# An adaptive prefetch holds about this much work (at the observed handler durations).
PREFETCH_WINDOW = timedelta(milliseconds=200)


@dataclass(frozen=True, slots=True)
class LeaseOptions:
    """How long a claim is leased and how often held leases are renewed, validated once.

    ``lease`` is 1 s – 24 h (default 60 s); ``renew_interval`` is how often every held lease is
    renewed, in one transaction (default: a third of the lease, at least 250 ms), and must be
    shorter than the lease. :class:`~jobledger.Runtime`, :class:`WorkerOptions`,
    :class:`~jobledger.App` and ``jobledger worker`` all take their lease settings through this
    one object, so they are checked in one place with one error code
    (``SCHEDULER_INVALID_ARGUMENT``, ``details.field`` naming the setting).
    """

    lease: timedelta = DEFAULT_LEASE
    renew_interval: timedelta | None = None
    lease_ms: int = field(init=False, repr=False, compare=False)
    renew_interval_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lease_ms = ms_from_timedelta(self.lease, "lease", minimum_ms=MIN_LEASE_MS)
        if lease_ms > MAX_LEASE_MS:
            raise InvalidArgument("lease must be at most 24 hours", details={"field": "lease"})
        if self.renew_interval is None:
            renew_ms = default_renew_interval_ms(lease_ms)
        else:
            renew_ms = ms_from_timedelta(self.renew_interval, "renew_interval", minimum_ms=1)
            if renew_ms >= lease_ms:
                raise InvalidArgument(
                    "renew_interval must be shorter than the lease",
                    details={"field": "renew_interval"},
                )
        object.__setattr__(self, "lease_ms", lease_ms)
        object.__setattr__(self, "renew_interval_ms", renew_ms)

    @classmethod
    def from_ms(cls, lease_ms: object, renew_interval_ms: object = None) -> LeaseOptions:
        """The same settings as integer milliseconds (``Runtime(lease_ms=…)``)."""
        for name, value in (("lease_ms", lease_ms), ("renew_interval_ms", renew_interval_ms)):
            if value is not None and not is_safe_int(value):
                raise InvalidArgument(
                    f"{name} must be an integer number of milliseconds", details={"field": name}
                )
        try:
            return cls(
                timedelta(milliseconds=lease_ms),  # type: ignore[arg-type]
                None if renew_interval_ms is None else timedelta(milliseconds=renew_interval_ms),  # type: ignore[arg-type]
            )
        except InvalidArgument as exc:
            field_name = {"lease": "lease_ms", "renew_interval": "renew_interval_ms"}.get(
                (exc.details or {}).get("field", ""), "lease_ms"
            )
            raise InvalidArgument(
                exc.message.replace((exc.details or {}).get("field", ""), field_name, 1),
                details={"field": field_name},
            ) from exc


def default_prefetch(concurrency: int) -> int:
    """The most claims an adaptive prefetch holds ahead: four per slot (Celery's default), and at
    least 256 so that fast handlers share claim and settle transactions in large batches
    (256 claims of handlers faster than 0.8 ms are still under one prefetch window of work)."""
    return max(256, 4 * concurrency)


@dataclass(frozen=True, slots=True)
class WorkerOptions:
    """How a worker runs. Every duration is a :class:`~datetime.timedelta`.

    * ``concurrency`` — slots: occurrences run at the same time (1–1,000). Sync handlers run on
      their slot's thread; ``async def`` handlers on the runtime's event loop.
    * ``prefetch`` — occurrences claimed ahead of free slots, so claims and settles are batched
      even at concurrency 1. ``None`` (the default) adapts: it holds enough claims to cover about
      ``PREFETCH_WINDOW`` (200 ms) of work at the handlers' observed durations, between 1 and
      ``max(256, 4 × concurrency)`` — large batches for fast handlers, no hoarding of slow work
      that other workers could run. An integer fixes it (0: claim only for idle slots).
      Claimed-ahead occurrences are leased to this worker and their leases are renewed while they
      wait; if the worker dies they are taken over as soon as its death is detected (or after
      their lease: ``docs/reliability.md``), so ``prefetch`` bounds what a crash delays.
    * ``kinds`` — the job kinds to claim (default: every kind the app has a handler for). An
      occurrence of another kind stays queued for a worker that knows it.
    * ``queues`` — the queues to claim from (default: every queue). Work in other queues stays
      queued for the workers that serve them; a paused queue is skipped (``docs/queues.md``).
    * ``workspace_id`` — only claim jobs whose authority names this workspace.
    * ``lease`` — how long a claim is leased (1 s – 24 h, default 60 s); ``renew_interval`` — how
      often every held lease is renewed, in one transaction (default: a third of the lease).
      With :class:`~jobledger.Worker` (given a runtime) these and ``owner_id`` belong to the
      runtime: leave them unset, or set them to the runtime's values.
    * ``poll_interval`` (± ``poll_jitter``, a fraction) — how long an idle worker waits before
      looking again; an enqueue in the same process, or a PostgreSQL NOTIFY, wakes it at once.
    * ``grace_period`` — at shutdown, how long running handlers may take to finish before their
      leases are given back.
    * ``stuck_grace`` — how long every slot may be stuck (a sync handler past its time limit
      that ignores cancellation: Python cannot stop its thread) before the worker gives up and
      stops, so that its supervisor starts a fresh process (``jobledger worker`` exits non-zero);
      ``None``: never. Claims bought ahead are given back as soon as every slot is stuck.
    * ``planner`` — also plan schedules (``jobledger.Planner``); ``plan_interval`` — the
      longest a worker sleeps between planner ticks (it wakes earlier for the next due slot).
    * ``retention`` — if set, settled occurrences older than this (and their events) are pruned
      every ``prune_interval``.
    * ``heartbeat_interval`` — how often the worker records that it is alive
      (``jobledger_workers``), for ``jobledger stats`` and the dashboard.
    * ``reap_interval`` — how often the worker looks for leases held by workers that are
      certainly dead (their liveness lock is free) and ends those leases, so the work is taken
      over at once instead of after the lease (``docs/reliability.md``).
    * ``owner_id`` — the lease owner recorded in the audit log (default:
      ``jobledger:<host>:<pid>:<random>``).
    * ``metrics_port`` — serve Prometheus metrics on this port (needs ``jobledger[metrics]``;
      ``None``: off), bound to ``metrics_host`` (loopback by default).
    """

    concurrency: int = 1
    prefetch: int | None = None
    kinds: frozenset[str] | None = None
    queues: frozenset[str] | None = None
    workspace_id: str | None = None
    lease: timedelta | None = None
    renew_interval: timedelta | None = None
    poll_interval: timedelta = DEFAULT_POLL_INTERVAL
    poll_jitter: float = 0.1
    grace_period: timedelta = DEFAULT_GRACE_PERIOD
    stuck_grace: timedelta | None = DEFAULT_STUCK_GRACE
    planner: bool = True
    plan_interval: timedelta = DEFAULT_PLAN_INTERVAL
    retention: timedelta | None = None
    prune_interval: timedelta = timedelta(hours=1)
    heartbeat_interval: timedelta = DEFAULT_WORKER_HEARTBEAT
    reap_interval: timedelta = timedelta(seconds=2)
    owner_id: str | None = None
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        if type(self.concurrency) is not int or not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise InvalidArgument(
                f"concurrency must be an integer between 1 and {MAX_CONCURRENCY} (a worker "
                "with more slots should be several processes)",
                details={"field": "concurrency", "max": MAX_CONCURRENCY},
            )
        if self.prefetch is not None and (
            type(self.prefetch) is not int or not 0 <= self.prefetch <= MAX_PREFETCH
        ):
            raise InvalidArgument(
                f"prefetch must be an integer between 0 and {MAX_PREFETCH}",
                details={"field": "prefetch"},
            )
        if self.kinds is not None:
            if isinstance(self.kinds, str) or not isinstance(self.kinds, Collection):
                raise InvalidArgument(
                    "kinds must be a set of job kinds", details={"field": "kinds"}
                )
            if not self.kinds:
                raise InvalidArgument("kinds must not be empty", details={"field": "kinds"})
            object.__setattr__(
                self,
                "kinds",
                frozenset(normalize_identifier(k, "kinds", max_length=128) for k in self.kinds),
            )
        if self.queues is not None:
            if isinstance(self.queues, str) or not isinstance(self.queues, Collection):
                raise InvalidArgument(
                    "queues must be a set of queue names", details={"field": "queues"}
                )
            if not self.queues:
                raise InvalidArgument("queues must not be empty", details={"field": "queues"})
            object.__setattr__(
                self, "queues", frozenset(normalize_queue_name(q, "queues") for q in self.queues)
            )
        if self.workspace_id is not None:
            object.__setattr__(
                self, "workspace_id", normalize_identifier(self.workspace_id, "workspace_id")
            )
        self.leases  # noqa: B018 - validates lease and renew_interval (LeaseOptions)
        ms_from_timedelta(self.poll_interval, "poll_interval", minimum_ms=1)
        if (
            type(self.poll_jitter) not in (int, float)
            or not math.isfinite(self.poll_jitter)
            or not 0 <= self.poll_jitter < 1
        ):
            raise InvalidArgument(
                "poll_jitter must be a number in [0, 1)", details={"field": "poll_jitter"}
            )
        ms_from_timedelta(self.grace_period, "grace_period")
        self.stuck_grace_ms  # noqa: B018 - validates stuck_grace
        if type(self.planner) is not bool:
            raise InvalidArgument("planner must be a boolean", details={"field": "planner"})
        ms_from_timedelta(self.plan_interval, "plan_interval", minimum_ms=10)
        if self.retention is not None:
            ms_from_timedelta(self.retention, "retention", minimum_ms=60_000)
        ms_from_timedelta(self.prune_interval, "prune_interval", minimum_ms=1000)
        ms_from_timedelta(self.heartbeat_interval, "heartbeat_interval", minimum_ms=100)
        ms_from_timedelta(self.reap_interval, "reap_interval", minimum_ms=100)
        if self.owner_id is not None:
            object.__setattr__(self, "owner_id", normalize_identifier(self.owner_id, "owner_id"))
        if self.metrics_port is not None and (
            type(self.metrics_port) is not int or not 0 <= self.metrics_port <= 65535
        ):
            raise InvalidArgument(
                "metrics_port must be a TCP port (0–65535)", details={"field": "metrics_port"}
            )
        if not isinstance(self.metrics_host, str) or not self.metrics_host.strip():
            raise InvalidArgument(
                "metrics_host must be a host name or address", details={"field": "metrics_host"}
            )

    # -- derived values, in milliseconds ----------------------------------------------------

    @property
    def leases(self) -> LeaseOptions:
        """The lease settings as one validated object (the defaults where unset)."""
        return LeaseOptions(
            DEFAULT_LEASE if self.lease is None else self.lease, self.renew_interval
        )

    @property
    def lease_ms(self) -> int:
        return self.leases.lease_ms

    @property
    def renew_interval_ms(self) -> int:
        return self.leases.renew_interval_ms

    @property
    def stuck_grace_ms(self) -> int | None:
        if self.stuck_grace is None:
            return None
        return ms_from_timedelta(self.stuck_grace, "stuck_grace", minimum_ms=1)

    @property
    def effective_prefetch(self) -> int:
        """The most claims held ahead of the slots (the adaptive prefetch's ceiling)."""
        return default_prefetch(self.concurrency) if self.prefetch is None else self.prefetch

    @property
    def adaptive_prefetch(self) -> bool:
        return self.prefetch is None

    def with_changes(self, **changes: Any) -> WorkerOptions:
        """A copy with some fields changed (validated again)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise InvalidArgument("unknown worker options", details={"fields": unknown})
        return replace(self, **changes)
