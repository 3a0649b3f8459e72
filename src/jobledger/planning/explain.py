"""``explain``: when will a job fire next, and why didn't it fire?

:func:`explain` gathers, through the :class:`~jobledger.Store` protocol only, what a person (or
the CLI's ``--json``, or the web page) needs to understand a scheduled job: the schedule in words,
the next fire times from the store's "now" with their DST notes, the misfire policy in force,
how far the planner got, the skipped runs and their reasons, and who holds the newest
occurrence's lease. Jobs whose trigger is not a schedule are explained too (they are enqueued by
their callers); that is a field of the answer, not an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from .. import contract
from ..errors import InvalidArgument, NotFound, SchedulerError
from ..models import MAX_CASES, Job, Occurrence, ParentState, ScheduleState, SkippedSlots
from ..schedules.describe import describe_interval
from ..schedules.json_format import is_schedule_json
from ..schedules.policy import MisfirePolicy
from ..schedules.triggers import Cron, Once, Trigger, parse_schedule, schedule_json, trigger_key
from ..schedules.zones import load_zone
from ..store.base import Store
from .planner import COUNT_CAP
from .waiting import WaitReason, why_waiting

__all__ = ["MAX_EXPLAIN_COUNT", "Explanation", "explain", "parent_lines"]

MAX_EXPLAIN_COUNT: Final = 100
# The most parents a text rendering lists one by one.
PARENTS_SHOWN: Final = 20
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
# What each overlap policy does, for people (SPEC §12).
_OVERLAP_WORDS: Final = {
    "allow": " (a slot fires whatever is still live)",
    "skip": " (a slot is skipped while an occurrence of the job is live)",
    "buffer_one": " (at most one occurrence waits behind a live one; further slots skipped)",
    "cancel_other": " (a firing cancels the live occurrences it replaces)",
}


def _moment(instant_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=instant_ms)


def _optional_moment(instant_ms: int | None) -> datetime | None:
    return None if instant_ms is None else _moment(instant_ms)


def _iso(moment: datetime | None) -> str | None:
    """``2026-03-08T07:00:00Z`` (with ``.123`` when there are milliseconds)."""
    if moment is None:
        return None
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.astimezone(UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def _words(moment: datetime) -> str:
    text = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if moment.microsecond:
        text += f".{moment.microsecond // 1000:03d}"
    return f"{text} UTC"


def _slots(count: int) -> str:
    return "1 slot" if count == 1 else f"{count:,} slots"


def _duration(millis: int) -> str:
    """``none``, ``1 minute``, ``30 seconds`` …"""
    if millis == 0:
        return "none"
    words = describe_interval(millis).removeprefix("every ")
    return words if words[0].isdigit() else f"1 {words}"


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job fires when it does (SPEC §6 ``app.explain``). Times are aware UTC datetimes.

    ``is_schedule`` is ``False`` for a job whose trigger is not a jobledger schedule (the
    planner leaves it alone; ``remarks`` says so). ``next_fire_times``: up to ``count`` slots
    strictly after ``now`` (empty while the job is disabled, or once a ``Once`` slot was
    planned); ``notes``: the DST remarks on those slots. ``last_planned``: the newest slot the
    planner decided (fired or skipped); ``planned_through``: every slot up to it is decided;
    ``next_due_at``: when a planner looks at the job next. ``misfire``: the policy in force.
    ``current_occurrence``: the job's newest occurrence (its ``status``, ``lease_owner`` and
    ``lease_expires_at`` are also properties here); ``parents``: when it is ``blocked``, the
    parents it waits for with their states (SPEC §10). ``recent_skips``: skipped runs, newest
    first.
    ``remarks``: plain sentences about anything unusual (disabled, slots waiting for a planner,
    an unreadable trigger, occurrences whose outcome is unknown). ``on_lost_lease``: the job's
    policy for an attempt whose worker is lost (SPEC §9); ``open_cases``: its occurrences
    waiting for an adjudication decision.
    ``waiting``: why the newest occurrence is not running when it is queued, retrying or
    blocked (:func:`jobledger.planning.waiting.why_waiting`: a paused queue, a partition at its
    limit, a rate window used up, …).
    """

    job_id: str
    kind: str
    enabled: bool
    revision: int
    is_schedule: bool
    now: datetime
    schedule: str | None = None
    trigger: Trigger | None = None
    misfire: MisfirePolicy | None = None
    next_fire_times: list[datetime] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    last_planned: datetime | None = None
    planned_through: datetime | None = None
    next_due_at: datetime | None = None
    current_occurrence: Occurrence | None = None
    parents: list[ParentState] = field(default_factory=list)
    recent_skips: list[SkippedSlots] = field(default_factory=list)
    remarks: list[str] = field(default_factory=list)
    waiting: list[WaitReason] = field(default_factory=list)
    on_lost_lease: str = "retry"
    open_cases: list[str] = field(default_factory=list)

    @property
    def status(self) -> str | None:
        """The newest occurrence's status (``None`` when the job never fired)."""
        return None if self.current_occurrence is None else self.current_occurrence.status

    @property
    def lease_owner(self) -> str | None:
        """Who holds the newest occurrence's lease (only while it is running)."""
        return None if self.current_occurrence is None else self.current_occurrence.lease_owner

    @property
    def lease_expires_at(self) -> datetime | None:
        occurrence = self.current_occurrence
        if occurrence is None:
            return None
        return _optional_moment(occurrence.lease_expires_at)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (camelCase keys, ISO-8601 UTC times) for ``--json`` and the web."""
        occurrence = self.current_occurrence
        return {
            "jobId": self.job_id,
            "kind": self.kind,
            "enabled": self.enabled,
            "revision": self.revision,
            "isSchedule": self.is_schedule,
            "now": _iso(self.now),
            "schedule": self.schedule,
            "trigger": None if self.trigger is None else schedule_json(self.trigger, self.misfire),
            "misfire": None if self.misfire is None else self.misfire.to_json(),
            "nextFireTimes": [_iso(moment) for moment in self.next_fire_times],
            "notes": list(self.notes),
            "lastPlanned": _iso(self.last_planned),
            "plannedThrough": _iso(self.planned_through),
            "nextDueAt": _iso(self.next_due_at),
            "currentOccurrence": None
            if occurrence is None
            else {
                "id": occurrence.id,
                "status": occurrence.status,
                "scheduledFor": _iso(_moment(occurrence.scheduled_for)),
                "triggerKey": occurrence.trigger_key,
                "jobRevision": occurrence.job_revision,
                "attempt": occurrence.attempt,
                "leaseOwner": occurrence.lease_owner,
                "leaseExpiresAt": _iso(self.lease_expires_at),
                "queue": occurrence.queue,
                "priority": occurrence.priority,
                "partition": occurrence.partition,
                "waiting": [reason.to_json() for reason in self.waiting],
                "parents": [
                    {"id": parent.occurrence_id, "jobId": parent.job_id, "status": parent.status}
                    for parent in self.parents
                ],
            },
            "recentSkips": [
                {
                    "first": _iso(_moment(skip.scheduled_for)),
                    "last": _iso(_moment(skip.last)),
                    "count": skip.count,
                    "reason": skip.reason,
                    "revision": skip.revision,
                    "recordedAt": _iso(_optional_moment(skip.recorded_at)),
                }
                for skip in self.recent_skips
            ],
            "remarks": list(self.remarks),
            "onLostLease": self.on_lost_lease,
            "openAdjudicationCases": list(self.open_cases),
        }

    def render(
        self,
        *,
        when: Callable[[int], str] | None = None,
        duration: Callable[[int], str] | None = None,
    ) -> str:
        """The explanation as lines of text for people — the one renderer, used by the CLI with
        its own instant (``when``, epoch ms → text, e.g. in ``--tz``) and duration formats;
        by default UTC words and spelled-out durations."""
        at = when or (lambda instant: _words(_moment(instant)))
        span_of = duration or _duration
        state = "enabled" if self.enabled else "disabled"
        lines = [f"job {self.job_id} (kind {self.kind}, revision {self.revision}, {state})"]
        if not self.is_schedule:
            lines.append("schedule: none (occurrences are enqueued by callers)")
        if self.schedule is not None:
            lines.append(f"schedule: {self.schedule}")
        if self.misfire is not None:
            policy = self.misfire
            limit = (
                f", catch-up limit {policy.catch_up_limit}" if policy.misfire == "catch_up" else ""
            )
            jitter = span_of(policy.jitter_ms) if policy.jitter_ms else "none"
            lines.append(
                f"misfire: {policy.misfire}, grace {span_of(policy.misfire_grace_ms)}{limit}, "
                f"jitter {jitter}"
            )
            lines.append(f"overlap: {policy.overlap}{_OVERLAP_WORDS[policy.overlap]}")
        if self.is_schedule:
            lines.append(f"next fire times (from {at(_ms(self.now))}):")
            lines.extend(
                f"  {at(_ms(moment))}{self._local(moment)}" for moment in self.next_fire_times
            )
            if not self.next_fire_times:
                lines.append("  none")
            lines.extend(f"  note: {note}" for note in self.notes)
            last = "never" if self.last_planned is None else at(_ms(self.last_planned))
            lines.append(f"last planned slot: {last}")
            if self.next_due_at is not None:
                lines.append(f"next planner look: {at(_ms(self.next_due_at))}")
        occurrence = self.current_occurrence
        if occurrence is None:
            lines.append("current occurrence: none")
        else:
            lines.append(
                f"current occurrence: {occurrence.id} {occurrence.status} "
                f"(slot {at(occurrence.scheduled_for)}, attempt {occurrence.attempt} of "
                f"{occurrence.max_attempts})"
            )
            if occurrence.lease_owner is not None and occurrence.lease_expires_at is not None:
                lines.append(
                    f"  lease: held by {occurrence.lease_owner} until "
                    f"{at(occurrence.lease_expires_at)}"
                )
            lines.extend(f"  not running: {reason.text}" for reason in self.waiting)
            lines.extend(parent_lines(self.parents))
        if self.recent_skips:
            lines.append("recent skips (newest first):")
            for skip in self.recent_skips:
                count = "more than 10,000" if skip.count is None else f"{skip.count:,}"
                span = at(skip.scheduled_for)
                if skip.last != skip.scheduled_for:
                    span += f" … {at(skip.last)}"
                lines.append(
                    f"  {span}: {count} slot(s) skipped ({skip.reason}, rev {skip.revision})"
                )
        if self.on_lost_lease == "adjudicate":
            lines.append(
                "lost lease: adjudicate (an attempt whose worker is lost waits for a decision)"
            )
        if self.open_cases:
            lines.append(f"outcome unknown, waiting for a decision: {len(self.open_cases)}")
            lines.extend(f"  jobledger adjudicate show {case}" for case in self.open_cases[:5])
        lines.extend(f"remark: {remark}" for remark in self.remarks)
        return "\n".join(lines)

    def _local(self, moment: datetime) -> str:
        """For a cron schedule in another zone than UTC, the slot's wall time in that zone."""
        if not isinstance(self.trigger, Cron) or self.trigger.timezone in ("UTC", "Etc/UTC"):
            return ""
        local = moment.astimezone(load_zone(self.trigger.timezone))
        return f"  ({local.strftime('%Y-%m-%d %H:%M')} {self.trigger.timezone})"


def parent_lines(parents: list[ParentState], *, shown: int = PARENTS_SHOWN) -> list[str]:
    """A blocked occurrence's parents as text lines: how many it waits for, then each parent
    (the undecided ones first) with its job and status, at most ``shown`` of them."""
    if not parents:
        return []
    waiting = [p for p in parents if p.status not in contract.TERMINAL_STATUSES]
    lines = [f"  waits for {len(waiting)} of {len(parents)} parent(s):"]
    ordered = waiting + [p for p in parents if p.status in contract.TERMINAL_STATUSES]
    lines.extend(f"    {p.occurrence_id} {p.status} (job {p.job_id})" for p in ordered[:shown])
    if len(ordered) > shown:
        lines.append(f"    … and {len(ordered) - shown:,} more")
    return lines


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _next_slots(trigger: Trigger, after_ms: int, count: int) -> list[int]:
    slots: list[int] = []
    slot = trigger.next_after(after_ms)
    while slot is not None and len(slots) < count:
        slots.append(slot)
        slot = trigger.next_after(slot)
    return slots


def _waiting_remark(trigger: Trigger, state: ScheduleState, now: int) -> str | None:
    """Slots already due but not yet planned: a planner has not run since they came due."""
    if isinstance(trigger, Once) or not state.job.enabled or now <= state.planned_through:
        return None
    waiting = trigger.count_between(state.planned_through, now, COUNT_CAP)
    if not waiting:
        return None
    amount = f"more than {COUNT_CAP:,} slots" if waiting is None else _slots(waiting)
    return (
        f"{amount} after {_words(_moment(state.planned_through))} are due but not planned "
        "yet: no planner has run since (start a worker, or call app.plan())"
    )


def _operator_remarks(job: Job) -> list[str]:
    """Which values an operator set (SPEC §14): they stand against the app's declaration."""
    if not job.operator_fields:
        return []
    return [
        f"set by an operator: {', '.join(job.operator_fields)} — stands until an operator "
        "changes it, or the app's declaration of it changes"
    ]


def explain(store: Store, job_id: str, *, count: int = 5) -> Explanation:
    """Explain ``job_id``'s schedule: next ``count`` (1..100) fire times and planning state.

    Raises ``SCHEDULER_NOT_FOUND`` for a missing job; a job whose trigger is not a schedule is
    answered with ``is_schedule=False``.
    """
    key = contract.normalize_identifier(job_id, "jobId")
    wanted = contract.normalize_positive_int(count, "count")
    if wanted > MAX_EXPLAIN_COUNT:
        raise InvalidArgument(
            f"count must be at most {MAX_EXPLAIN_COUNT}", details={"field": "count"}
        )
    state = store.schedule_state(key)
    job = state.job if state is not None else store.get_job(key)
    if job is None:
        raise NotFound(f"Scheduler job does not exist: {key}", details={"jobId": key})
    now = store.now()
    page = store.list_occurrences(job_id=key, limit=1)
    current = page.items[0] if page.items else None
    base: dict[str, Any] = {
        "job_id": job.id,
        "kind": job.kind,
        "enabled": job.enabled,
        "revision": job.revision,
        "now": _moment(now),
        "current_occurrence": current,
        "waiting": [] if current is None else why_waiting(store, current),
        "parents": (
            store.parent_states(current.id)
            if current is not None and current.status == "blocked"
            else []
        ),
        "on_lost_lease": job.on_lost_lease,
        "open_cases": [
            case.occurrence_id
            for case in store.adjudication_cases(limit=MAX_CASES)
            if case.job_id == key
        ],
    }
    if not is_schedule_json(job.trigger):
        return Explanation(
            **base,
            is_schedule=False,
            remarks=[
                "the trigger is not a jobledger schedule: the planner leaves this job alone, "
                "and its occurrences are enqueued by callers",
                *_operator_remarks(job),
            ],
        )
    try:
        parsed = parse_schedule(job.trigger)
    except SchedulerError as exc:
        return Explanation(
            **base,
            is_schedule=True,
            remarks=[f"the stored schedule cannot be read by this jobledger: {exc.message}"],
        )
    assert parsed is not None
    trigger, policy = parsed
    remarks: list[str] = _operator_remarks(job)
    slots: list[int] = []
    if not job.enabled:
        remarks.append("disabled: no slot is planned until the job is enabled again")
    elif isinstance(trigger, Once):
        slots, remark = _once_slots(store, key, trigger, state, now)
        if remark is not None:
            remarks.append(remark)
    else:
        slots = _next_slots(trigger, now, wanted)
        if state is not None:
            waiting = _waiting_remark(trigger, state, now)
            if waiting is not None:
                remarks.append(waiting)
    notes = [note for slot in slots for note in trigger.notes(slot)]
    return Explanation(
        **base,
        is_schedule=True,
        schedule=trigger.describe(),
        trigger=trigger,
        misfire=policy,
        next_fire_times=[_moment(slot) for slot in slots],
        notes=notes,
        last_planned=None if state is None else _optional_moment(state.last_slot),
        planned_through=None if state is None else _moment(state.planned_through),
        next_due_at=None if state is None else _optional_moment(state.next_due_at),
        recent_skips=[] if state is None else list(reversed(state.recent_skips)),
        remarks=remarks,
    )


def _once_slots(
    store: Store, job_id: str, trigger: Once, state: ScheduleState | None, now: int
) -> tuple[list[int], str | None]:
    at = trigger.at_ms
    skipped = state is not None and any(
        skip.scheduled_for == skip.last == at for skip in state.recent_skips
    )
    planned = (
        (state is not None and state.last_slot == at)
        or skipped
        or bool(
            store.list_occurrences_by_trigger(
                job_id=job_id, trigger_key=trigger_key(trigger, at), limit=1
            )
        )
    )
    if planned:
        return [], f"the one slot ({_words(_moment(at))}) has been planned; it never fires again"
    if at > now:
        return [at], None
    return [], f"the slot {_words(_moment(at))} is due and waits for the next planner pass"
