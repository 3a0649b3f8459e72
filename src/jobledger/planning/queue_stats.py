"""Per-queue gauges for the metrics collector, bounded like its per-kind series.

:func:`queue_series` turns :meth:`~jobledger.Store.queue_depths` into the values of the
``jobledger_queue_*`` families (``jobledger.metrics``), with no Prometheus import here. At most
``max_queues`` queues get series of their own — paused queues first, then by live work
(depth + running), then by name — and the rest are summed into ``queue="other"``, so a store
with thousands of queue names still exports a bounded number of series.

Held-back work is counted as rows, by the limit that holds them now (the claim path does not
count refused claims): ``partition`` — held rows (gate 2: their partition is at its
``partition_concurrency`` or out of ``partition_rate`` tokens); ``paused`` — the queued rows of a
paused queue; ``concurrency`` — ready rows of a queue at its ``concurrency`` limit; ``rate`` —
ready rows of a queue whose rate window is used up. A row is counted under the first of these
that applies.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..contract import OCCURRENCE_STATUSES
from ..models import QueueDepth

__all__ = [
    "HELD_REASONS",
    "OTHER_QUEUE",
    "QUEUE_FAMILIES",
    "QueueSeries",
    "kind_series",
    "queue_series",
]

OTHER_QUEUE: Final = "other"
HELD_REASONS: Final = ("partition", "paused", "concurrency", "rate")
DEPTH_STATES: Final = ("ready", "waiting", "held", "blocked")
LIMITS: Final = ("concurrency", "worker_concurrency", "partition_concurrency")
# (name, help, labels) of the collector's per-queue gauge families, in the order of samples().
QUEUE_FAMILIES: Final = (
    ("jobledger_queue_depth", "Queued occurrences per queue by state.", ("queue", "state")),
    ("jobledger_queue_running", "Running occurrences per queue.", ("queue",)),
    ("jobledger_queue_paused", "1 if the queue is paused.", ("queue",)),
    (
        "jobledger_queue_held_back",
        "Queued occurrences a limit holds back now, by the limit.",
        ("queue", "reason"),
    ),
    ("jobledger_queue_limit", "Declared queue limits.", ("queue", "limit")),
    (
        "jobledger_store_queues",
        'Queues with series of their own (shown) or summed into queue="other" (folded).',
        ("state",),
    ),
)


@dataclass
class QueueSeries:
    """The values of the per-queue families, keyed by their label values."""

    depth: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    paused: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    held_back: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    limits: dict[tuple[str, str], int] = field(default_factory=dict)
    shown: int = 0
    folded: int = 0

    def samples(self) -> dict[str, list[tuple[list[str], int]]]:
        """``{family name: [(label values, value), …]}`` for :data:`QUEUE_FAMILIES`."""

        def rows(values: dict[Any, int]) -> list[tuple[list[str], int]]:
            return [
                (list(key) if isinstance(key, tuple) else [key], value)
                for key, value in sorted(values.items())
            ]

        return {
            "jobledger_queue_depth": rows(self.depth),
            "jobledger_queue_running": rows(self.running),
            "jobledger_queue_paused": rows(self.paused),
            "jobledger_queue_held_back": rows(self.held_back),
            "jobledger_queue_limit": rows(self.limits),
            "jobledger_store_queues": [(["shown"], self.shown), (["folded"], self.folded)],
        }


def held_back(depth: QueueDepth) -> dict[str, int]:
    """A queue's queued rows by the limit holding them back now (module docstring)."""
    queue = depth.queue
    counts = dict.fromkeys(HELD_REASONS, 0)
    counts["partition"] = depth.held
    if queue.paused:
        counts["paused"] = depth.ready + depth.waiting
    elif queue.concurrency is not None and depth.running >= queue.concurrency:
        counts["concurrency"] = depth.ready
    elif queue.rate is not None and depth.rate_claims >= queue.rate.limit:
        counts["rate"] = depth.ready
    return counts


def queue_series(depths: Sequence[QueueDepth], max_queues: int) -> QueueSeries:
    """The per-queue series of ``depths``, at most ``max_queues`` queues shown (the rest in
    ``queue="other"``; a real queue named ``other`` is summed there too)."""
    ranked = sorted(
        (depth for depth in depths if depth.name != OTHER_QUEUE),
        key=lambda d: (not d.queue.paused, -(d.depth + d.running), d.name),
    )
    shown = {depth.name for depth in ranked[:max_queues]}
    series = QueueSeries(shown=len(shown), folded=len(depths) - len(shown))
    for depth in depths:
        label = depth.name if depth.name in shown else OTHER_QUEUE
        for state in DEPTH_STATES:
            series.depth[(label, state)] += int(getattr(depth, state))
        series.running[label] += depth.running
        series.paused[label] += int(depth.queue.paused)
        for reason, count in held_back(depth).items():
            series.held_back[(label, reason)] += count
        if label != OTHER_QUEUE:
            for limit in LIMITS:
                value = getattr(depth.queue, limit)
                if value is not None:
                    series.limits[(label, limit)] = int(value)
            for limit in ("rate", "partition_rate"):
                rate = getattr(depth.queue, limit)
                if rate is not None:
                    series.limits[(label, limit)] = rate.limit
    return series


def kind_series(
    counts: dict[tuple[str, str], int],
    capped: set[tuple[str, str]],
    shown: Sequence[str],
    *,
    other: str,
) -> tuple[list[tuple[list[str], int]], list[list[str]]]:
    """``jobledger_occurrences`` samples from ``{(status, kind): count}``: every status of every
    ``shown`` kind, zeros included (an alert on a status that never happened reads 0, not
    nothing), the rest summed into ``other``; and the ``[status, kind]`` labels whose count is
    a lower bound (``capped``: it stopped at the cap; ``other``'s when a folded kind's did)."""
    values: list[tuple[list[str], int]] = []
    marks: list[list[str]] = []
    wanted = set(shown)
    for kind in shown:
        for status in OCCURRENCE_STATUSES:
            values.append(([status, kind], counts.get((status, kind), 0)))
            if (status, kind) in capped:
                marks.append([status, kind])
    if any(kind not in wanted for _, kind in counts):
        folded = dict.fromkeys(OCCURRENCE_STATUSES, 0)
        for (status, kind), count in counts.items():
            if kind not in wanted:
                folded[status] = folded.get(status, 0) + count
        values.extend(([status, other], count) for status, count in folded.items())
        marks.extend([s, other] for s in sorted({s for s, k in capped if k not in wanted}))
    return values, marks
