"""What the planner and the store exchange: schedule progress, plans, fired and skipped slots.

These are the :class:`~jobledger.store.Store` protocol's own value types for planning
(``due_schedules``, ``record_plans``, ``schedule_state``): they live at the bottom so that the
store, the planner and the face all speak them without depending on each other. Instants are
epoch milliseconds, each with a datetime twin (see :mod:`~jobledger.models.times`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from ..contract import MAX_ENQUEUE_BATCH
from .records import Job, Occurrence
from .times import UtcTime, UtcTimeOrNone

__all__ = [
    "DEFAULT_DUE_LIMIT",
    "MAX_BACKFILL_SLOTS",
    "MAX_DUE_LIMIT",
    "MAX_PLANS_PER_CALL",
    "MAX_SLOTS_PER_CALL",
    "RECENT_SKIPS_KEPT",
    "SKIP_REASONS",
    "DueSchedules",
    "PlanOutcome",
    "SchedulePlan",
    "ScheduleState",
    "SkipReason",
    "SkippedSlots",
    "SlotFiring",
]

SkipReason = Literal["coalesced", "misfire", "catch_up_limit", "overlap"]
SKIP_REASONS: Final = ("coalesced", "misfire", "catch_up_limit", "overlap")
# The planning operations' limits (per call), which callers size their batches by.
DEFAULT_DUE_LIMIT: Final = 500
MAX_DUE_LIMIT: Final = 1000
MAX_PLANS_PER_CALL: Final = 1000
MAX_SLOTS_PER_CALL: Final = MAX_ENQUEUE_BATCH
RECENT_SKIPS_KEPT: Final = 20
# Slots one backfill may create (SPEC §12): a larger range is refused, naming the cap.
MAX_BACKFILL_SLOTS: Final = 10_000


@dataclass(frozen=True, slots=True)
class SkippedSlots:
    """A run of consecutive slots of one job that the planner did not fire, for one reason.

    ``scheduled_for`` and ``last`` are the first and the last slot of the run (equal for one
    slot); ``count`` is the number of slots, or ``None`` when counting would have meant walking
    more than 10,000 of them. ``revision`` is the job revision the run was planned under and
    ``recorded_at`` the store instant it was recorded (``None`` on a run not yet recorded).
    """

    job_id: str
    scheduled_for: int
    last: int
    count: int | None
    reason: SkipReason
    revision: int
    recorded_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored form (an element of ``skips_json``)."""
        return {
            "first": self.scheduled_for,
            "last": self.last,
            "count": self.count,
            "reason": self.reason,
            "revision": self.revision,
            "recordedAt": self.recorded_at,
        }

    scheduled_time = UtcTime("scheduled_for")
    last_time = UtcTime("last")
    recorded_time = UtcTimeOrNone("recorded_at")


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """One job's planning progress (its ``jobledger_schedules`` row) and the job itself.

    ``revision`` is the job revision the row tracks (always ``job.revision``: both are written
    in one transaction). Slots at or before ``planned_through`` have been decided; the planner
    looks at the job again when the store's clock reaches ``next_due_at`` (``None``: never, e.g.
    a disabled job or a ``Once`` already planned). ``last_slot`` is the newest slot decided
    (fired or skipped); ``recent_skips`` the last 20 skipped runs, oldest first.
    """

    job: Job
    revision: int
    planned_through: int
    next_due_at: int | None
    last_slot: int | None
    recent_skips: tuple[SkippedSlots, ...]
    updated_at: int

    @property
    def job_id(self) -> str:
        return self.job.id

    planned_through_time = UtcTime("planned_through")
    next_due_time = UtcTimeOrNone("next_due_at")
    last_slot_time = UtcTimeOrNone("last_slot")
    updated_time = UtcTime("updated_at")


@dataclass(frozen=True, slots=True)
class DueSchedules:
    """What :meth:`~jobledger.Store.due_schedules` read at ``now``.

    ``schedules``: due ones (``next_due_at <= now``), earliest first, at most the limit asked
    for. ``next_due_at``: the earliest ``next_due_at`` of any schedule when read (``<= now``
    whenever something is due; ``None`` when no schedule is waiting at all).
    """

    now: int
    schedules: tuple[ScheduleState, ...]
    next_due_at: int | None

    now_time = UtcTime("now")
    next_due_time = UtcTimeOrNone("next_due_at")


@dataclass(frozen=True, slots=True)
class SlotFiring:
    """One slot to enqueue: identity on the slot, ``available_at`` = slot + jitter."""

    scheduled_for: int
    trigger_key: str
    available_at: int

    scheduled_time = UtcTime("scheduled_for")
    available_time = UtcTime("available_at")


@dataclass(frozen=True, slots=True)
class SchedulePlan:
    """A planner's decision for one job, recorded only if the row is still as it was read.

    ``expected_*`` are the values read (:class:`ScheduleState`); the rest is what to write.
    ``once``: the slots are a ``Once`` job's, which count once per job across revisions: if an
    occurrence with the slot's trigger key, or a skipped run of exactly that slot, exists under
    any revision, the slot is neither enqueued nor reported skipped again. ``overlap``: the
    schedule's overlap policy (SPEC §12), which the store applies to ``fire`` against the job's
    live occurrences inside the transaction that records the plan.
    """

    job_id: str
    expected_revision: int
    expected_planned_through: int
    expected_last_slot: int | None
    planned_through: int
    last_slot: int | None
    next_due_at: int | None
    fire: tuple[SlotFiring, ...] = ()
    skipped: tuple[SkippedSlots, ...] = ()
    once: bool = False
    overlap: str = "allow"


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    """What :meth:`~jobledger.Store.record_plans` did for one plan.

    ``applied`` is ``False`` when the schedule row had changed since it was read (another
    planner recorded first, or the job was edited or disabled): nothing was written for it.
    ``enqueued`` lists only new occurrences (firings that already existed are counted in
    ``deduplicated``); ``skipped`` the runs recorded, with ``recorded_at`` set.
    """

    job_id: str
    applied: bool
    enqueued: tuple[Occurrence, ...] = ()
    skipped: tuple[SkippedSlots, ...] = ()
    deduplicated: int = 0
