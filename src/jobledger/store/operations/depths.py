"""Per-queue read model (operators' view of SPEC §7): how deep each queue is, and where one
queued occurrence stands in the claim lane.

Bounded reads, whatever the backlog: which queues to report comes from the declarations, a
skip scan of the claim index (one probe per (queue, kind) lane) and of the held index (one per
queue), the running rows (bounded by the workers' slots) and a scan of at most ``cap`` waiting
and ``cap`` blocked rows; each queue's ready, held and running counts stop at ``cap`` rows of
their index. A count that reached its
cap is named in :attr:`QueueDepth.capped` (the true number is at least that). The waiting and
blocked counts come from one scan each across all queues (the waiting index is ordered by due
instant, not by queue): when that scan reaches the cap, every queue's count is a lower bound.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ... import contract
from ...errors import InvalidArgument
from ...models import DEPTH_CAP, OccurrenceGate, Queue, QueueDepth
from .. import inputs, rows
from ..tx import Tx
from .admission import HELD, READY, WAITING
from .base import OperationsBase

__all__ = ["DepthOperations"]

_GATES = {READY: "ready", WAITING: "waiting", HELD: "held"}
# The most queues one read reports (queue names are operators' names, not data).
MAX_QUEUES = 1000


def _cap(value: object) -> int:
    if type(value) is not int or not 1 <= value <= 1_000_000:
        raise InvalidArgument(
            "cap must be an integer from 1 to 1,000,000", details={"field": "cap"}
        )
    return value


def _count(tx: Tx, query: str, params: dict[str, Any]) -> int:
    found = tx.one(query, params)
    return 0 if found is None else int(found["n"])


class DepthOperations(OperationsBase):
    """The per-queue read model (see the module docstring)."""

    def queue_depths(
        self, *, names: Collection[str] | None = None, cap: int = DEPTH_CAP
    ) -> list[QueueDepth]:
        self._assert_open()
        bound = _cap(cap)
        wanted = None if names is None else inputs.normalize_queues(names)

        def body(tx: Tx) -> list[QueueDepth]:
            now = tx.now()
            declared = {row["name"]: rows.queue_from_row(row) for row in tx.all("list_queues")}
            waiting = {
                row["queue"]: int(row["n"]) for row in tx.all("waiting_by_queue", {"cap": bound})
            }
            blocked = {
                row["queue"]: int(row["n"]) for row in tx.all("blocked_by_queue", {"cap": bound})
            }
            if wanted is not None:
                found = set(wanted)
            else:
                found = (
                    set(declared)
                    | {row["queue"] for row in tx.all("ready_lanes")}
                    | {row["queue"] for row in tx.all("held_queues")}
                    | {row["queue"] for row in tx.all("running_queues")}
                    | set(waiting)
                    | set(blocked)
                )
            waiting_capped = sum(waiting.values()) >= bound
            blocked_capped = sum(blocked.values()) >= bound
            result = []
            for name in sorted(found)[:MAX_QUEUES]:
                queue = declared.get(name, Queue(name=name))
                params = {"queue": name, "cap": bound}
                counts = {
                    "ready": _count(tx, "count_ready_in_queue", params),
                    "held": _count(tx, "count_held_in_queue", params),
                    "running": _count(tx, "count_running_in_queue", params),
                }
                capped = {field for field, n in counts.items() if n >= bound}
                if waiting_capped:
                    capped.add("waiting")
                if blocked_capped:
                    capped.add("blocked")
                rate_claims, window_end = 0, None
                if queue.rate is not None:
                    per = queue.rate.per_ms
                    start = now - now % per
                    window = tx.one("get_rate_window", {"queue": name, "partition_key": ""})
                    if window is not None and int(window["window_start"]) == start:
                        rate_claims = int(window["claims"])
                    window_end = start + per
                result.append(
                    QueueDepth(
                        queue=queue,
                        ready=counts["ready"],
                        waiting=waiting.get(name, 0),
                        held=counts["held"],
                        running=counts["running"],
                        blocked=blocked.get(name, 0),
                        capped=frozenset(capped),
                        rate_claims=rate_claims,
                        rate_window_end=window_end,
                    )
                )
            return result

        return self._read(body)

    def occurrence_gate(self, occurrence_id: str) -> OccurrenceGate | None:
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")

        def body(tx: Tx) -> OccurrenceGate | None:
            row = tx.one("occurrence_gate", {"occurrence_id": key})
            if row is None:
                return None
            queue, partition = row["queue"], row["partition_key"]
            gate = (
                _GATES.get(int(row["gate"])) if row["status"] in ("queued", "retry_wait") else None
            )
            running = claims = 0
            wake_at = None
            if partition is not None:
                running = _count(
                    tx,
                    "count_partition_running",
                    {"queue": queue, "partition_key": partition, "cap": DEPTH_CAP},
                )
                window = tx.one("get_rate_window", {"queue": queue, "partition_key": partition})
                if window is not None:
                    claims = int(window["claims"])
                    wake_at = None if window["wake_at"] is None else int(window["wake_at"])
            return OccurrenceGate(
                occurrence_id=row["occurrence_id"],
                queue=queue,
                partition=partition,
                gate=gate,
                runnable=bool(int(row["runnable"])),
                partition_running=running,
                partition_rate_claims=claims,
                partition_wake_at=wake_at,
            )

        return self._read(body)
