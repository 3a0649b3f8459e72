"""The planner's store operations: read due schedules, record a planning decision atomically.

The planner (``jobledger.planning.planner``) decides *what* a schedule's due slots become; these
operations make the decision durable and race-free:

* :meth:`ScheduleOperations.due_schedules` — the schedules whose ``next_due_at`` has come, joined
  with their job, read through the ``jobledger_schedules_due`` index (never a scan of all jobs);
* :meth:`ScheduleOperations.record_plans` — per job, in one transaction for the whole batch: a
  compare-and-swap of the schedule row on what the planner read, the slot occurrences (the
  ordinary idempotent enqueue), the skipped runs (``skips_json`` and one
  ``schedule_slots_skipped`` event per run) and the new ``planned_through`` / ``last_slot`` /
  ``next_due_at``. A planner that lost the race for a job changes nothing for it;
* :meth:`ScheduleOperations.schedule_state` — one job's planning state, for ``explain``;
* :meth:`ScheduleOperations.record_backfill` — the slots of a range that have no occurrence
  yet (under any revision of the job), enqueued and audited in one transaction.

The value types the protocol speaks (``ScheduleState``, ``DueSchedules``, ``SchedulePlan``,
``SlotFiring``, ``SkippedSlots``, ``PlanOutcome``) live in :mod:`jobledger.models.plans`, below
both the store and the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from ... import contract
from ...errors import DataCorrupt, InvalidArgument, JobDisabled, NotFound, RevisionConflict
from ...models import (
    DEFAULT_DUE_LIMIT,
    MAX_BACKFILL_SLOTS,
    MAX_DUE_LIMIT,
    MAX_PLANS_PER_CALL,
    MAX_SLOTS_PER_CALL,
    RECENT_SKIPS_KEPT,
    SKIP_REASONS,
    DueSchedules,
    Occurrence,
    PlanOutcome,
    SchedulePlan,
    ScheduleState,
    SkippedSlots,
    SkipReason,
    SlotFiring,
)
from ...schedules.policy import OVERLAP_POLICIES
from .. import common, inputs, rows
from ..tx import Row, Tx
from .base import JobMeta, OperationsBase
from .firings import Firing, firing_of, insert_firings

__all__ = ["ScheduleOperations"]

SKIPPED_EVENT: Final = "schedule_slots_skipped"
BACKFILLED_ACTION: Final = "schedule_backfilled"


# -- validation -------------------------------------------------------------------------------


def _optional_ms(value: object, name: str) -> int | None:
    return None if value is None else contract.normalize_epoch_ms(value, name)


def _normalize_skip(skip: object, plan: SchedulePlan, name: str) -> SkippedSlots:
    if not isinstance(skip, SkippedSlots):
        raise InvalidArgument(f"{name} must be a SkippedSlots", details={"field": name})
    first = contract.normalize_epoch_ms(skip.scheduled_for, f"{name}.scheduled_for")
    last = contract.normalize_epoch_ms(skip.last, f"{name}.last")
    if last < first:
        raise InvalidArgument(f"{name}.last is before its first slot", details={"field": name})
    if skip.count is not None and (
        not contract.is_safe_int(skip.count)
        or skip.count < 1
        or (first == last) != (skip.count == 1)
    ):
        raise InvalidArgument(
            f"{name}.count must be None or the positive number of slots in the run",
            details={"field": f"{name}.count"},
        )
    if skip.reason not in SKIP_REASONS:
        raise InvalidArgument(
            f"{name}.reason must be one of {', '.join(SKIP_REASONS)}",
            details={"field": f"{name}.reason"},
        )
    if skip.job_id != plan.job_id or skip.revision != plan.expected_revision:
        raise InvalidArgument(
            f"{name} must name the plan's job and expected revision", details={"field": name}
        )
    return skip


def _normalize_plan(plan: object, index: int) -> SchedulePlan:
    name = f"plans[{index}]"
    if not isinstance(plan, SchedulePlan):
        raise InvalidArgument(f"{name} must be a SchedulePlan", details={"index": index})
    contract.normalize_identifier(plan.job_id, f"{name}.job_id")
    contract.normalize_positive_int(plan.expected_revision, f"{name}.expected_revision")
    previous = contract.normalize_epoch_ms(
        plan.expected_planned_through, f"{name}.expected_planned_through"
    )
    _optional_ms(plan.expected_last_slot, f"{name}.expected_last_slot")
    through = contract.normalize_epoch_ms(plan.planned_through, f"{name}.planned_through")
    if through < previous:
        raise InvalidArgument(
            f"{name}.planned_through must not move backwards", details={"index": index}
        )
    _optional_ms(plan.last_slot, f"{name}.last_slot")
    _optional_ms(plan.next_due_at, f"{name}.next_due_at")
    slot = -1
    for position, firing in enumerate(plan.fire):
        label = f"{name}.fire[{position}]"
        if not isinstance(firing, SlotFiring):
            raise InvalidArgument(f"{label} must be a SlotFiring", details={"index": index})
        scheduled = contract.normalize_epoch_ms(firing.scheduled_for, f"{label}.scheduled_for")
        contract.normalize_identifier(firing.trigger_key, f"{label}.trigger_key")
        contract.normalize_epoch_ms(firing.available_at, f"{label}.available_at")
        if scheduled <= slot:
            raise InvalidArgument(
                f"{name}.fire must be strictly increasing slots", details={"index": index}
            )
        slot = scheduled
    for position, skip in enumerate(plan.skipped):
        _normalize_skip(skip, plan, f"{name}.skipped[{position}]")
    if plan.overlap not in OVERLAP_POLICIES:
        raise InvalidArgument(
            f"{name}.overlap must be one of {', '.join(OVERLAP_POLICIES)}",
            details={"field": f"{name}.overlap"},
        )
    return plan


def _read_skips(encoded: object, job_id: str) -> tuple[SkippedSlots, ...]:
    value = rows.read_stored_json(encoded, "schedule skips")
    if not isinstance(value, list):
        return ()
    skips: list[SkippedSlots] = []
    for item in value:
        if not isinstance(item, dict):
            continue
        count = item.get("count")
        recorded = item.get("recordedAt")
        skips.append(
            SkippedSlots(
                job_id=job_id,
                scheduled_for=int(item["first"]),
                last=int(item["last"]),
                count=None if count is None else int(count),
                reason=cast(SkipReason, item["reason"]),
                revision=int(item["revision"]),
                recorded_at=None if recorded is None else int(recorded),
            )
        )
    return tuple(skips)


def _state_from_row(row: Row) -> ScheduleState:
    job = rows.job_from_row(row)
    next_due = row["next_due_at"]
    last_slot = row["last_slot"]
    return ScheduleState(
        job=job,
        revision=int(row["schedule_revision"]),
        planned_through=int(row["planned_through"]),
        next_due_at=None if next_due is None else int(next_due),
        last_slot=None if last_slot is None else int(last_slot),
        recent_skips=_read_skips(row["skips_json"], job.id),
        updated_at=int(row["schedule_updated_at"]),
    )


def _skip_event_data(skip: SkippedSlots) -> str:
    return contract.canonical_json(
        {
            "first": skip.scheduled_for,
            "last": skip.last,
            "count": skip.count,
            "reason": skip.reason,
            "revision": skip.revision,
        },
        "event.data",
    )


class ScheduleOperations(OperationsBase):
    """The planner's reads and its one atomic write (see the module docstring)."""

    def due_schedules(
        self, *, limit: int = DEFAULT_DUE_LIMIT, now: int | None = None
    ) -> DueSchedules:
        self._assert_open()
        bounded = contract.normalize_positive_int(limit, "limit")
        if bounded > MAX_DUE_LIMIT:
            raise InvalidArgument(
                f"limit must be at most {MAX_DUE_LIMIT}", details={"field": "limit"}
            )
        given = _optional_ms(now, "now")

        def body(tx: Tx) -> DueSchedules:
            at = tx.now() if given is None else given
            # One probe of the due index answers "is anything due?" and "until when may a
            # planner sleep?"; only when something is due is the batch (with its jobs) read.
            head = tx.one("schedule_next_due")
            earliest = None if head is None else int(head["next_due_at"])
            if earliest is None or earliest > at:
                return DueSchedules(now=at, schedules=(), next_due_at=earliest)
            found = tx.all("schedules_due", {"now": at, "limit": bounded})
            return DueSchedules(
                now=at, schedules=tuple(_state_from_row(row) for row in found), next_due_at=earliest
            )

        return self._read(body)

    def schedule_state(self, job_id: str) -> ScheduleState | None:
        self._assert_open()
        key = contract.normalize_identifier(job_id, "jobId")
        row = self._read(lambda tx: tx.one("schedule_state", {"job_id": key}))
        return None if row is None else _state_from_row(row)

    def record_plans(self, plans: Sequence[SchedulePlan]) -> list[PlanOutcome]:
        if not isinstance(plans, (list, tuple)):
            raise InvalidArgument("plans must be a list of SchedulePlan")
        if len(plans) > MAX_PLANS_PER_CALL:
            raise InvalidArgument(
                f"record_plans takes at most {MAX_PLANS_PER_CALL} plans",
                details={"count": len(plans), "limit": MAX_PLANS_PER_CALL},
            )
        normalized = [_normalize_plan(plan, index) for index, plan in enumerate(plans)]
        if len({plan.job_id for plan in normalized}) != len(normalized):
            raise InvalidArgument("record_plans takes at most one plan per job")
        slots = sum(len(plan.fire) for plan in normalized)
        if slots > MAX_SLOTS_PER_CALL:
            raise InvalidArgument(
                f"record_plans enqueues at most {MAX_SLOTS_PER_CALL} slots per call",
                details={"count": slots, "limit": MAX_SLOTS_PER_CALL},
            )
        if not normalized:
            self._assert_open()
            return []
        inserted = False
        cancelled: list[str] = []

        def body(tx: Tx) -> list[PlanOutcome]:
            nonlocal inserted
            cancelled.clear()
            now = tx.now()

            def cancel(row: Row) -> None:
                # A live occurrence an overlap="cancel_other" firing replaces (SPEC §12).
                if self._cancel_in(tx, now, row, actor="planner", reason="overlap") is not None:
                    cancelled.append(row["occurrence_id"])

            outcomes = _BatchRecorder(tx, now, cancel).record(normalized)
            inserted = any(outcome.enqueued for outcome in outcomes)
            return outcomes

        recorded = self._write(body)
        if inserted:
            self._after_enqueue()
        if cancelled:
            self._after_settle(cancelled)
        return recorded

    def record_backfill(
        self,
        job_id: str,
        *,
        expected_revision: int,
        fire: Sequence[SlotFiring],
        start: int,
        end: int,
        actor: str,
    ) -> list[Occurrence]:
        key = contract.normalize_identifier(job_id, "jobId")
        revision = contract.normalize_positive_int(expected_revision, "expectedRevision")
        who = contract.normalize_identifier(actor, "actor")
        first = contract.normalize_epoch_ms(start, "start")
        last = contract.normalize_epoch_ms(end, "end")
        if first >= last:
            raise InvalidArgument(
                "a backfill range must end after it starts", details={"start": first, "end": last}
            )
        if not isinstance(fire, (list, tuple)):
            raise InvalidArgument("fire must be a list of SlotFiring", details={"field": "fire"})
        if len(fire) > MAX_BACKFILL_SLOTS:
            raise InvalidArgument(
                f"a backfill creates at most {MAX_BACKFILL_SLOTS} slots per call; split the range",
                details={"count": len(fire), "limit": MAX_BACKFILL_SLOTS},
            )
        slots = [_normalize_slot(slot, index, first, last) for index, slot in enumerate(fire)]

        def body(tx: Tx) -> list[Occurrence]:
            now = tx.now()
            row = tx.one("get_job", {"job_id": key})
            if row is None:
                raise NotFound(f"Scheduler job does not exist: {key}", details={"jobId": key})
            meta = JobMeta.from_row(row)
            if meta.revision != revision:
                raise RevisionConflict(
                    "the job changed since its schedule was read; backfill again",
                    details={"jobId": key, "expected": revision, "actual": meta.revision},
                )
            if not meta.enabled:
                raise JobDisabled(f"Scheduler job is disabled: {key}", details={"jobId": key})
            # A slot counts as done when an occurrence of the job holds it, under any revision
            # (the id is on the revision; the slot's instant and trigger key are not).
            present = {
                (int(found["scheduled_for"]), found["trigger_key"])
                for found in tx.all(
                    "backfill_present", {"job_id": key, "start": first, "end": last}
                )
            }
            missing = [s for s in slots if (s.scheduled_for, s.trigger_key) not in present]
            firings = [_slot_firing(key, slot, meta) for slot in missing]
            inserted = insert_firings(tx, now, firings)
            created = [inserted[f.occurrence_id] for f in firings if f.occurrence_id in inserted]
            if created:
                tx.run("insert_events", tx.table([event for _, event in created]))
            self._audit(
                tx,
                now=now,
                action=BACKFILLED_ACTION,
                actor=who,
                subject=key,
                data={
                    "jobId": key,
                    "start": first,
                    "end": last,
                    "slots": len(slots),
                    "created": len(created),
                    "revision": revision,
                },
            )
            return [occurrence for occurrence, _ in created]

        made = self._write(body)
        if made:
            self._after_enqueue()
        return made


def _slot_firing(job_id: str, slot: SlotFiring, meta: JobMeta) -> Firing:
    """A schedule slot as the firing the store inserts (the job's payload, snapshotted by the
    insert; the identity on the job's revision, the slot and its trigger key)."""
    return firing_of(
        inputs.EnqueueInput(
            job_id=job_id,
            scheduled_for=slot.scheduled_for,
            trigger_key=slot.trigger_key,
            available_at=slot.available_at,
            payload=None,
            payload_json=None,
            once_per_trigger=False,
        ),
        meta,
    )


def _normalize_slot(slot: object, index: int, start: int, end: int) -> SlotFiring:
    if not isinstance(slot, SlotFiring):
        raise InvalidArgument(f"fire[{index}] must be a SlotFiring", details={"index": index})
    at = contract.normalize_epoch_ms(slot.scheduled_for, f"fire[{index}].scheduledFor")
    if not start <= at < end:
        raise InvalidArgument(
            f"fire[{index}] lies outside the backfill range",
            details={"index": index, "scheduledFor": at, "start": start, "end": end},
        )
    return SlotFiring(
        scheduled_for=at,
        trigger_key=contract.normalize_identifier(slot.trigger_key, f"fire[{index}].triggerKey"),
        available_at=contract.normalize_epoch_ms(slot.available_at, f"fire[{index}].availableAt"),
    )


class _BatchRecorder:
    """One :meth:`ScheduleOperations.record_plans` transaction, in a few statements per batch.

    Each step runs as one pipelined batch (``rows_many`` / ``many``: one round trip on
    PostgreSQL): the compare-and-swaps (rows locked in job-id order, so planners racing on
    PostgreSQL never deadlock), the jobs whose slots fire (read once each, inside this
    transaction), the occurrence inserts, the skip lists and the events. Only the rare paths —
    a ``Once`` slot, a firing that already exists — cost a statement of their own.
    """

    def __init__(self, tx: Tx, now: int, cancel: Callable[[Row], None]) -> None:
        self.tx = tx
        self.now = now
        self.cancel = cancel

    def record(self, plans: Sequence[SchedulePlan]) -> list[PlanOutcome]:
        tx, now = self.tx, self.now
        ordered = sorted(plans, key=lambda plan: plan.job_id)
        swapped = tx.rows_many("record_schedule_plan", [_cas_params(p, now) for p in ordered])
        outcomes = {plan.job_id: PlanOutcome(job_id=plan.job_id, applied=False) for plan in plans}
        applied: list[tuple[SchedulePlan, Row]] = [
            (plan, row) for plan, row in zip(ordered, swapped, strict=True) if row is not None
        ]
        decided: list[tuple[SchedulePlan, tuple[SlotFiring, ...], tuple[SkippedSlots, ...]]] = []
        for plan, _row in applied:
            if plan.once and self._once_slots_planned(plan):
                decided.append((plan, (), ()))
            else:
                fire, overlapping = self._overlap(plan)
                skipped = (*plan.skipped, *overlapping)
                decided.append((plan, fire, tuple(_recorded(s, now) for s in skipped)))
        events: list[dict[str, Any]] = []
        stored_skips = {plan.job_id: row["skips_json"] for plan, row in applied}
        skip_updates = []
        for plan, _fire, skipped in decided:
            if skipped:
                skip_updates.append(_skip_update(plan.job_id, stored_skips[plan.job_id], skipped))
                events.extend(_skip_event(skip, now) for skip in skipped)
        if skip_updates:
            tx.many("set_schedule_skips", skip_updates)
        enqueued = self._enqueue({plan.job_id: fire for plan, fire, _skipped in decided if fire})
        for plan, fire, skipped in decided:
            new, event_rows = enqueued.get(plan.job_id, ((), []))
            events.extend(event_rows)
            outcomes[plan.job_id] = PlanOutcome(
                job_id=plan.job_id,
                applied=True,
                enqueued=new,
                skipped=skipped,
                deduplicated=len(fire) - len(new),
            )
        if events:
            tx.run("insert_events", tx.table(events))
        return [outcomes[plan.job_id] for plan in plans]

    def _enqueue(
        self, firings: Mapping[str, tuple[SlotFiring, ...]]
    ) -> dict[str, tuple[tuple[Occurrence, ...], list[dict[str, Any]]]]:
        """Insert every firing; return, per job, the new occurrences and their events."""
        if not firings:
            return {}
        tx, now = self.tx, self.now
        jobs = list(firings)
        found = tx.rows_many("get_job", [{"job_id": job_id} for job_id in jobs])
        metas: dict[str, JobMeta] = {}
        for job_id, row in zip(jobs, found, strict=True):
            if row is None:
                raise DataCorrupt(
                    "A schedule row names a job that does not exist", details={"jobId": job_id}
                )
            metas[job_id] = JobMeta.from_row(row)
        planned = [
            _slot_firing(job_id, slot, metas[job_id])
            for job_id, fire in firings.items()
            for slot in fire
        ]
        inserted = insert_firings(tx, now, planned)
        result: dict[str, tuple[list[Occurrence], list[dict[str, Any]]]] = {
            job_id: ([], []) for job_id in firings
        }
        for firing in planned:
            job_id = firing.request.job_id
            if firing.occurrence_id not in inserted:
                # Nothing inserted: the firing exists already (its identity is on the slot),
                # unless the job is not at the revision the compare-and-swap just confirmed.
                if tx.one("get_occurrence", {"occurrence_id": firing.occurrence_id}) is None:
                    raise DataCorrupt(
                        "A schedule row and its job disagree on the revision",
                        details={"jobId": job_id},
                    )
                continue
            occurrence, event = inserted[firing.occurrence_id]
            new, job_events = result[job_id]
            new.append(occurrence)
            job_events.append(event)
        return {job_id: (tuple(new), job_events) for job_id, (new, job_events) in result.items()}

    def _overlap(
        self, plan: SchedulePlan
    ) -> tuple[tuple[SlotFiring, ...], tuple[SkippedSlots, ...]]:
        """Apply the schedule's overlap policy (SPEC §12) to the plan's firings, against the
        job's live occurrences as this transaction sees them (after the compare-and-swap that
        serializes the job's planners): which slots fire, and the run of slots skipped for
        ``overlap``. ``cancel_other`` cancels the live ones here, in the same transaction."""
        fire = plan.fire
        if plan.overlap == "allow" or not fire:
            return fire, ()
        job = self.tx.one("get_job", {"job_id": plan.job_id})
        if job is None:
            raise DataCorrupt(
                "A schedule row names a job that does not exist", details={"jobId": plan.job_id}
            )
        live = self.tx.all("live_of_job", {"job_id": plan.job_id, "kind": job["kind"]})
        if plan.overlap == "skip":
            # One at a time: nothing fires while one is live, else the oldest due slot only.
            kept = () if live else fire[:1]
        elif plan.overlap == "buffer_one":
            # At most one waits (queued or retrying) behind the running one.
            waiting = [row for row in live if row["status"] != "running"]
            kept = () if waiting else fire[:1]
        else:  # cancel_other: the newest slot replaces whatever is live
            for row in live:
                self.cancel(row)
            kept = fire[-1:]
        left = [firing for firing in fire if firing not in kept]
        if not left:
            return kept, ()
        run = SkippedSlots(
            job_id=plan.job_id,
            scheduled_for=left[0].scheduled_for,
            last=left[-1].scheduled_for,
            count=len(left),
            reason="overlap",
            revision=plan.expected_revision,
        )
        return kept, (run,)

    def _once_slots_planned(self, plan: SchedulePlan) -> bool:
        """Whether a ``Once`` slot of this plan was already fired or skipped under any revision.

        Fired: an occurrence of the job carries the slot's trigger key (whatever its revision).
        Skipped: a ``schedule_slots_skipped`` event of the job covers exactly that slot; its
        data is canonical JSON (sorted keys), so ``"first":<slot>,"last":<slot>,`` is exact.
        """
        keys = {firing.scheduled_for: firing.trigger_key for firing in plan.fire}
        slots = [*keys, *(skip.scheduled_for for skip in plan.skipped)]
        for slot in slots:
            found = self.tx.one(
                "once_slot_planned",
                {
                    "job_id": plan.job_id,
                    "trigger_key": keys.get(slot, f"once:{slot}"),
                    "pattern": f'%"first":{slot},"last":{slot},%',
                },
            )
            if found is not None:
                return True
        return False


def _cas_params(plan: SchedulePlan, now: int) -> dict[str, Any]:
    return {
        "job_id": plan.job_id,
        "expected_revision": plan.expected_revision,
        "expected_planned_through": plan.expected_planned_through,
        "expected_last_slot": -1 if plan.expected_last_slot is None else plan.expected_last_slot,
        "planned_through": plan.planned_through,
        "last_slot": plan.last_slot,
        "next_due_at": plan.next_due_at,
        "now": now,
    }


def _recorded(skip: SkippedSlots, now: int) -> SkippedSlots:
    return SkippedSlots(
        job_id=skip.job_id,
        scheduled_for=skip.scheduled_for,
        last=skip.last,
        count=skip.count,
        reason=skip.reason,
        revision=skip.revision,
        recorded_at=now,
    )


def _skip_update(job_id: str, stored: object, recorded: Sequence[SkippedSlots]) -> dict[str, Any]:
    """The row's skip list with ``recorded`` appended, the newest 20 kept."""
    value = rows.read_stored_json(stored, "schedule skips")
    kept = [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
    kept = [*kept, *(skip.to_json() for skip in recorded)][-RECENT_SKIPS_KEPT:]
    return {"job_id": job_id, "skips_json": contract.canonical_json(kept, "schedule.skips")}


def _skip_event(skip: SkippedSlots, now: int) -> dict[str, Any]:
    return common.event_params(
        job_id=skip.job_id,
        event_type=SKIPPED_EVENT,
        occurred_at=now,
        data_json=_skip_event_data(skip),
    )
