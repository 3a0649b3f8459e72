"""The planner: turns due schedule slots into occurrences, durably and without a leader.

:class:`Planner` talks to the :class:`~jobledger.Store` protocol only. One :meth:`Planner.tick`:

1. reads the due schedules (``store.due_schedules``: one probe of the due index when nothing is
   due, which is the common case);
2. decides, per job and without touching the store, which slots fire and which are skipped
   (:func:`plan_schedule`, a pure function of the job's schedule row and "now");
3. records the decisions (``store.record_plans``): per job a compare-and-swap of the schedule row
   on what was read, the occurrences and the skipped runs, in one transaction per batch.

Why any number of planners is safe: each decision is recorded only if the schedule row is still
exactly what the planner read, so for each (job, revision, planned-through instant) one
decision wins and the others change nothing; and even the enqueue itself is idempotent, because
an occurrence's identity is (job, revision, slot, ``"<type>:<slot>"``). No locks are held while
deciding, so a crashed planner leaves nothing behind.

Semantics (SPEC §6): slots strictly after ``planned_through`` are due up to now. Under
``coalesce`` (the default) the due slots of a pass become one occurrence, for the latest, however
late they are. Otherwise a slot is *missed* when seen more than ``misfire_grace`` after its
instant, and missed slots follow the job's :class:`~jobledger.schedules.MisfirePolicy`. A
backlog is never walked slot by slot (the planner uses ``latest_at_or_before`` and
``count_between``), so months of an every-second cron plan in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Final

from ..clock import Clock
from ..contract import MAX_SAFE_INTEGER
from ..errors import InvalidArgument, SchedulerError
from ..models import (
    MAX_DUE_LIMIT,
    MAX_SLOTS_PER_CALL,
    Occurrence,
    SchedulePlan,
    ScheduleState,
    SkippedSlots,
    SkipReason,
    SlotFiring,
)
from ..models.times import UtcTime, UtcTimeOrNone
from ..schedules.policy import MisfirePolicy, jitter_offset_ms
from ..schedules.triggers import Every, Once, Trigger, parse_schedule, trigger_key
from ..store.base import Store

__all__ = [
    "COUNT_CAP",
    "DEFAULT_BATCH_SIZE",
    "MAX_FIRES_PER_PASS",
    "PlanReport",
    "Planner",
    "SkippedSlots",
    "plan_schedule",
]

COUNT_CAP: Final = 10_000
"""A skipped run's ``count`` is ``None`` when counting it would mean walking more slots."""
DEFAULT_BATCH_SIZE: Final = 500
MAX_FIRES_PER_PASS: Final = 1_000
"""Slots one job fires per pass; the rest of its backlog is planned by the next pass (of the
same tick), so one transaction never grows with a job's backlog."""
MAX_ROUNDS_PER_TICK: Final = 1_000
UNREADABLE_RETRY_MS: Final = 60 * 60 * 1000
_SLOTS_PER_TRANSACTION: Final = 5_000


@dataclass(frozen=True, slots=True)
class PlanReport:
    """What one :meth:`Planner.tick` did.

    ``enqueued``: the occurrences new in this tick (firings that already existed, e.g. enqueued
    by a racing planner, are not listed). ``skipped``: one :class:`SkippedSlots` per run of
    consecutive skipped slots of a job with one reason, oldest first. ``next_due_at``: the
    earliest instant (epoch ms) any schedule wants a planner again, read after the tick — sleep
    until then (``None``: no schedule is waiting). ``planned_jobs``: the jobs whose decision
    this planner recorded. ``lost_races``: decisions not recorded because the schedule changed
    after it was read (another planner was first, or the job was edited). ``unreadable``: jobs
    whose stored schedule this jobledger cannot evaluate (e.g. written by a newer version);
    they are looked at again an hour later. ``now``: the instant planned up to.
    ``next_due_time`` and ``now_time`` are those instants as aware UTC datetimes.
    """

    enqueued: list[Occurrence] = field(default_factory=list)
    skipped: list[SkippedSlots] = field(default_factory=list)
    next_due_at: int | None = None
    planned_jobs: int = 0
    lost_races: int = 0
    unreadable: list[str] = field(default_factory=list)
    now: int = 0

    # The instants as aware UTC datetimes (models/times.py).
    next_due_time = UtcTimeOrNone("next_due_at")
    now_time = UtcTime("now")


# -- deciding (pure) --------------------------------------------------------------------------


def _count(trigger: Trigger, after_ms: int, until_ms: int) -> int | None:
    """Slots in ``(after, until]``: exact for ``Every`` (arithmetic), else capped."""
    if isinstance(trigger, Every):
        return trigger.count_between(after_ms, until_ms, MAX_SAFE_INTEGER)
    return trigger.count_between(after_ms, until_ms, COUNT_CAP)


def _newest_slots(trigger: Trigger, until_ms: int, after_ms: int, limit: int) -> list[int]:
    """Up to ``limit`` newest slots in ``(after, until]``, oldest first, searching backwards."""
    if isinstance(trigger, Every):
        last = trigger.latest_at_or_before(until_ms, after_ms)
        if last is None:
            return []
        first = max(last - (limit - 1) * trigger.interval_ms, after_ms + 1)
        start = trigger.next_after(first - 1)
        if start is None:
            return []
        return list(range(start, last + 1, trigger.interval_ms))
    found: list[int] = []
    slot = trigger.latest_at_or_before(until_ms, after_ms)
    while slot is not None:
        found.append(slot)
        if len(found) >= limit:
            break
        slot = trigger.latest_at_or_before(slot - 1, after_ms)
    found.reverse()
    return found


def _run(
    state: ScheduleState, trigger: Trigger, after_ms: int, last: int, reason: SkipReason
) -> SkippedSlots:
    """The skipped run of every slot in ``(after, last]``."""
    first = trigger.next_after(after_ms)
    assert first is not None
    assert first <= last
    return SkippedSlots(
        job_id=state.job.id,
        scheduled_for=first,
        last=last,
        count=1 if first == last else _count(trigger, after_ms, last),
        reason=reason,
        revision=state.revision,
    )


def _firings(
    state: ScheduleState, trigger: Trigger, policy: MisfirePolicy, slots: list[int]
) -> tuple[SlotFiring, ...]:
    jitter = policy.jitter_ms
    return tuple(
        SlotFiring(
            scheduled_for=slot,
            trigger_key=trigger_key(trigger, slot),
            available_at=slot + jitter_offset_ms(state.job.id, slot, jitter),
        )
        for slot in slots
    )


def _plan(
    state: ScheduleState,
    *,
    planned_through: int,
    next_due_at: int | None,
    last_slot: int | None,
    fire: tuple[SlotFiring, ...] = (),
    skipped: tuple[SkippedSlots, ...] = (),
    once: bool = False,
) -> SchedulePlan:
    return SchedulePlan(
        job_id=state.job.id,
        expected_revision=state.revision,
        expected_planned_through=state.planned_through,
        expected_last_slot=state.last_slot,
        planned_through=planned_through,
        last_slot=last_slot,
        next_due_at=next_due_at,
        fire=fire,
        skipped=skipped,
        once=once,
    )


def _plan_once(
    state: ScheduleState, trigger: Once, policy: MisfirePolicy, now: int
) -> SchedulePlan:
    through = max(state.planned_through, now)
    at = trigger.at_ms
    if state.last_slot == at:  # planned under this or an earlier revision: never again
        return _plan(state, planned_through=through, next_due_at=None, last_slot=at)
    if at > now:
        return _plan(state, planned_through=through, next_due_at=at, last_slot=state.last_slot)
    # A Once slot counts even when it lies before the revision was written (a new job's past
    # ``at`` is a missed slot); the store drops it if any revision already fired or skipped it.
    if now - at > policy.misfire_grace_ms and policy.misfire == "skip":
        run = SkippedSlots(state.job.id, at, at, 1, "misfire", state.revision)
        return _plan(
            state,
            planned_through=through,
            next_due_at=None,
            last_slot=at,
            skipped=(run,),
            once=True,
        )
    fire = _firings(state, trigger, policy, [at])
    return _plan(
        state, planned_through=through, next_due_at=None, last_slot=at, fire=fire, once=True
    )


def _plan_periodic(
    state: ScheduleState, trigger: Trigger, policy: MisfirePolicy, now: int
) -> SchedulePlan:
    after = state.planned_through
    if now <= after:  # a planner whose clock is behind the row: nothing new to decide
        return _plan(
            state,
            planned_through=after,
            next_due_at=trigger.next_after(after),
            last_slot=state.last_slot,
        )
    latest = trigger.latest_at_or_before(now, after)
    if latest is None:
        return _plan(
            state,
            planned_through=now,
            next_due_at=trigger.next_after(now),
            last_slot=state.last_slot,
        )
    skipped: tuple[SkippedSlots, ...] = ()
    if policy.misfire == "coalesce":
        # Every due slot of this pass, missed or within the grace, collapses into the latest:
        # a worker back after a minute runs an every-5-seconds job once, not twelve times.
        before = trigger.latest_at_or_before(latest - 1, after)
        if before is not None:
            skipped = (_run(state, trigger, after, before, "coalesced"),)
        return _plan(
            state,
            planned_through=now,
            next_due_at=trigger.next_after(now),
            last_slot=latest,
            fire=_firings(state, trigger, policy, [latest]),
            skipped=skipped,
        )
    # Missed: first seen more than the grace after its instant (exactly the grace is not).
    boundary = now - policy.misfire_grace_ms - 1
    missed_last = trigger.latest_at_or_before(boundary, after) if boundary > after else None
    if missed_last is None:
        slots = trigger.slots_between(after, now, MAX_FIRES_PER_PASS + 1)
    elif policy.misfire == "skip":
        skipped = (_run(state, trigger, after, missed_last, "misfire"),)
        slots = trigger.slots_between(missed_last, now, MAX_FIRES_PER_PASS + 1)
    elif trigger.count_between(after, missed_last, policy.catch_up_limit) is not None:
        # catch_up within its limit (a walk of at most catch_up_limit slots): all fire
        slots = trigger.slots_between(after, now, MAX_FIRES_PER_PASS + 1)
    else:  # catch_up beyond its limit: the newest catch_up_limit missed slots fire
        missed = _newest_slots(trigger, missed_last, after, policy.catch_up_limit)
        older = trigger.latest_at_or_before(missed[0] - 1, after)
        assert older is not None
        skipped = (_run(state, trigger, after, older, "catch_up_limit"),)
        slots = missed[: MAX_FIRES_PER_PASS + 1]
        if len(slots) <= MAX_FIRES_PER_PASS:
            slots += trigger.slots_between(missed_last, now, MAX_FIRES_PER_PASS + 1 - len(slots))
    if len(slots) > MAX_FIRES_PER_PASS:
        # A long backlog of slots that all fire: plan the first part now and leave the job
        # due, so the next pass of this tick continues right after the last slot fired.
        slots = slots[:MAX_FIRES_PER_PASS]
        return _plan(
            state,
            planned_through=slots[-1],
            next_due_at=now,
            last_slot=slots[-1],
            fire=_firings(state, trigger, policy, slots),
            skipped=skipped,
        )
    newest = slots[-1] if slots else (skipped[-1].last if skipped else state.last_slot)
    return _plan(
        state,
        planned_through=now,
        next_due_at=trigger.next_after(now),
        last_slot=newest,
        fire=_firings(state, trigger, policy, slots),
        skipped=skipped,
    )


def plan_schedule(state: ScheduleState, now: int) -> SchedulePlan:
    """Decide what a due schedule's slots become at ``now`` (pure: no store, no clock).

    Raises :class:`~jobledger.SchedulerError` when the stored trigger cannot be evaluated.
    """
    parsed = parse_schedule(state.job.trigger)
    if parsed is None:
        raise InvalidArgument(
            "the job's trigger is not a jobledger schedule", details={"jobId": state.job.id}
        )
    trigger, policy = parsed
    if isinstance(trigger, Once):
        plan = _plan_once(state, trigger, policy, now)
    else:
        plan = _plan_periodic(state, trigger, policy, now)
    # The overlap policy is applied by the store, against the job's live occurrences, in the
    # transaction that records the plan: only there can planners and workers not race it.
    return plan if policy.overlap == "allow" else replace(plan, overlap=policy.overlap)


def _park(state: ScheduleState, now: int) -> SchedulePlan:
    """Look at an unreadable schedule again later instead of on every tick."""
    return _plan(
        state,
        planned_through=state.planned_through,
        next_due_at=now + UNREADABLE_RETRY_MS,
        last_slot=state.last_slot,
    )


# -- the tick ---------------------------------------------------------------------------------


class Planner:
    """Plans due schedule slots into occurrences; run :meth:`tick` from any number of places.

    ``clock``: epoch-ms callable for "now" (default: the store's clock — the database clock on
    PostgreSQL, so planners on machines with skewed clocks still agree). ``batch_size``: the
    jobs read and recorded per transaction (1..1000).
    """

    def __init__(
        self, store: Store, *, clock: Clock | None = None, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> None:
        if clock is not None and not callable(clock):
            raise InvalidArgument("clock must be a function", details={"field": "clock"})
        if type(batch_size) is not int or not 1 <= batch_size <= MAX_DUE_LIMIT:
            raise InvalidArgument(
                f"batch_size must be an integer between 1 and {MAX_DUE_LIMIT}",
                details={"field": "batch_size"},
            )
        self.store = store
        self._clock = clock
        self._batch_size = batch_size

    def tick(self) -> PlanReport:
        """One planning pass over every due schedule (in batches), then report.

        Costs one indexed read when nothing is due. A tick stops after 1,000 batches even if
        schedules keep coming due (the report's ``next_due_at`` then lies in the past).
        """
        enqueued: list[Occurrence] = []
        skipped: list[SkippedSlots] = []
        unreadable: list[str] = []
        planned: set[str] = set()
        lost = 0
        now = 0
        next_due_at: int | None = None
        for _ in range(MAX_ROUNDS_PER_TICK + 1):
            due = self.store.due_schedules(
                limit=self._batch_size, now=None if self._clock is None else self._clock()
            )
            now, next_due_at = due.now, due.next_due_at
            if not due.schedules:
                break
            plans: list[SchedulePlan] = []
            for state in due.schedules:
                try:
                    plans.append(plan_schedule(state, due.now))
                except SchedulerError:
                    unreadable.append(state.job.id)
                    plans.append(_park(state, due.now))
            for chunk in _chunks(plans):
                for outcome in self.store.record_plans(chunk):
                    if not outcome.applied:
                        lost += 1
                        continue
                    planned.add(outcome.job_id)
                    enqueued.extend(outcome.enqueued)
                    skipped.extend(outcome.skipped)
        skipped.sort(key=lambda run: (run.scheduled_for, run.job_id))
        return PlanReport(
            enqueued=enqueued,
            skipped=skipped,
            next_due_at=next_due_at,
            planned_jobs=len(planned),
            lost_races=lost,
            unreadable=sorted(set(unreadable)),
            now=now,
        )


def _chunks(plans: list[SchedulePlan]) -> list[list[SchedulePlan]]:
    """Split a batch so no transaction enqueues more than a few thousand slots."""
    limit = min(_SLOTS_PER_TRANSACTION, MAX_SLOTS_PER_CALL)
    chunks: list[list[SchedulePlan]] = []
    current: list[SchedulePlan] = []
    slots = 0
    for plan in plans:
        if current and slots + len(plan.fire) > limit:
            chunks.append(current)
            current, slots = [], 0
        current.append(plan)
        slots += len(plan.fire)
    if current:
        chunks.append(current)
    return chunks
