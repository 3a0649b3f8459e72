"""Backfill (SPEC §12): enqueue every slot of a job's schedule in a range that has no occurrence.

The slots are computed here, from the job's stored trigger (the same rules the planner fires
by, jitter included); the store then writes, in one transaction, those no occurrence of the job
holds yet — under any revision — and one ``schedule_backfilled`` audit record. A slot's
occurrence id is deterministic, so a repeated or concurrent backfill (or a planner firing the
same slot meanwhile) creates nothing twice. The job's misfire policy does not apply: a
backfilled slot runs however late it is. At most :data:`~jobledger.models.MAX_BACKFILL_SLOTS`
slots per call; a larger range is refused, naming the cap, and changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from ..durations import epoch_ms_from
from ..errors import InvalidArgument, NotFound
from ..models import MAX_BACKFILL_SLOTS, Occurrence, SlotFiring
from ..schedules.policy import jitter_offset_ms
from ..schedules.triggers import parse_schedule, trigger_key
from ..store import Store

__all__ = ["backfill"]


def backfill(
    store: Store, job_id: str, *, start: datetime | int, end: datetime | int, actor: str
) -> list[Occurrence]:
    """Enqueue the slots of ``job_id``'s schedule in ``[start, end)`` (aware datetimes or epoch
    ms) that have no occurrence yet; return the occurrences created, oldest slot first."""
    first = epoch_ms_from(start, "start")
    last = epoch_ms_from(end, "end")
    if first >= last:
        raise InvalidArgument(
            "a backfill range must end after it starts", details={"start": first, "end": last}
        )
    state = store.schedule_state(job_id)
    if state is None:
        if store.get_job(job_id) is None:
            raise NotFound(f"Scheduler job does not exist: {job_id}", details={"jobId": job_id})
        raise InvalidArgument(
            f"job {job_id} has no schedule to backfill (it is enqueued by callers)",
            details={"jobId": job_id, "reason": "not_scheduled"},
        )
    parsed = parse_schedule(state.job.trigger)
    assert parsed is not None  # schedule_state answers only for jobledger schedules
    trigger, policy = parsed
    slots = trigger.slots_between(first - 1, last - 1, MAX_BACKFILL_SLOTS + 1)
    if len(slots) > MAX_BACKFILL_SLOTS:
        raise InvalidArgument(
            f"the range holds more than {MAX_BACKFILL_SLOTS} slots of job {job_id}; "
            "backfill it in parts",
            details={"jobId": job_id, "limit": MAX_BACKFILL_SLOTS, "start": first, "end": last},
        )
    fire = [
        SlotFiring(
            scheduled_for=slot,
            trigger_key=trigger_key(trigger, slot),
            available_at=slot + jitter_offset_ms(state.job.id, slot, policy.jitter_ms),
        )
        for slot in slots
    ]
    return store.record_backfill(
        state.job.id,
        expected_revision=state.revision,
        fire=fire,
        start=first,
        end=last,
        actor=actor,
    )
