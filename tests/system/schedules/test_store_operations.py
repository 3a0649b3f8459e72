"""Conformance of the planner's store operations (``due_schedules``, ``record_plans``,
``schedule_state``) on every store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobledger import InvalidArgument
from jobledger.models import (
    RECENT_SKIPS_KEPT,
    SchedulePlan,
    SkippedSlots,
    SlotFiring,
)
from jobledger.planning.planner import plan_schedule
from jobledger.schedules import Cron, Every, MisfirePolicy, Once

from .helpers import AUTHORITY, all_occurrences, schedule_job, skip_events

MINUTE = 60_000


def _plan(state, *, fire=(), skipped=(), through=None, next_due=None, last=None, once=False):
    return SchedulePlan(
        job_id=state.job.id,
        expected_revision=state.revision,
        expected_planned_through=state.planned_through,
        expected_last_slot=state.last_slot,
        planned_through=state.planned_through if through is None else through,
        last_slot=last,
        next_due_at=next_due,
        fire=tuple(fire),
        skipped=tuple(skipped),
        once=once,
    )


def test_new_schedule_rows_are_due_at_once_and_only_schedules_have_rows(store, clock):
    schedule_job(store, "every", Every(timedelta(minutes=1)))
    schedule_job(store, "off", Every(timedelta(minutes=1)), enabled=False)
    store.create_job(id="manual", kind="tick", authority=AUTHORITY)
    due = store.due_schedules()
    assert due.now == clock()
    assert [state.job.id for state in due.schedules] == ["every"]
    assert due.next_due_at == clock()
    state = due.schedules[0]
    assert (state.revision, state.planned_through, state.next_due_at) == (1, clock(), clock())
    assert state.last_slot is None and state.recent_skips == ()
    assert store.schedule_state("manual") is None
    assert store.schedule_state("off").next_due_at is None
    assert store.schedule_state("missing") is None


def test_due_schedules_orders_by_due_limits_and_reports_the_earliest(store, clock):
    for index in range(5):
        schedule_job(store, f"j{index}", Every(timedelta(minutes=1)))
        clock.advance(10)
    due = store.due_schedules(limit=3)
    assert [s.job.id for s in due.schedules] == ["j0", "j1", "j2"]
    assert due.next_due_at == clock() - 50
    # Asked for an earlier "now", only what was due by then.
    early = store.due_schedules(now=clock() - 35)
    assert [s.job.id for s in early.schedules] == ["j0", "j1"]
    with pytest.raises(InvalidArgument):
        store.due_schedules(limit=0)
    with pytest.raises(InvalidArgument):
        store.due_schedules(limit=1001)


def test_nothing_due_reports_when_to_look_next(store, clock):
    schedule_job(store, "once", Once(datetime(2100, 1, 1, tzinfo=UTC)))
    [state] = store.due_schedules().schedules
    [outcome] = store.record_plans([plan_schedule(state, clock())])
    assert outcome.applied and outcome.enqueued == ()
    due = store.due_schedules()
    assert due.schedules == ()
    assert due.next_due_at == 4_102_444_800_000
    store.update_job("once", expected_revision=1, patch={"enabled": False})
    assert store.due_schedules().next_due_at is None


def test_record_plans_enqueues_skips_and_moves_the_row(store, clock):
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    [state] = store.due_schedules().schedules
    base = clock() - clock() % MINUTE
    firing = SlotFiring(
        scheduled_for=base + MINUTE,
        trigger_key=f"every:{base + MINUTE}",
        available_at=base + MINUTE + 7,
    )
    skip = SkippedSlots("j", base - 5 * MINUTE, base - MINUTE, 5, "misfire", 1)
    plan = _plan(
        state,
        fire=[firing],
        skipped=[skip],
        through=clock() + 1,
        next_due=base + 2 * MINUTE,
        last=base + MINUTE,
    )
    [outcome] = store.record_plans([plan])
    assert outcome.applied and outcome.deduplicated == 0
    [occurrence] = outcome.enqueued
    assert (occurrence.scheduled_for, occurrence.trigger_key, occurrence.available_at) == (
        base + MINUTE,
        f"every:{base + MINUTE}",
        base + MINUTE + 7,
    )
    assert occurrence.job_revision == 1 and occurrence.status == "queued"
    assert outcome.skipped == (
        SkippedSlots("j", base - 5 * MINUTE, base - MINUTE, 5, "misfire", 1, clock()),
    )
    after = store.schedule_state("j")
    assert (after.planned_through, after.last_slot, after.next_due_at) == (
        clock() + 1,
        base + MINUTE,
        base + 2 * MINUTE,
    )
    assert after.recent_skips == outcome.skipped
    [event] = [e for e in store.history(job_id="j") if e.type == "schedule_slots_skipped"]
    assert event.occurrence_id is None
    assert skip_events(store, "j") == [event.data]
    assert event.data == {
        "first": base - 5 * MINUTE,
        "last": base - MINUTE,
        "count": 5,
        "reason": "misfire",
        "revision": 1,
    }
    assert [e.type for e in store.history(occurrence_id=occurrence.id)] == ["occurrence_enqueued"]


def test_a_stale_plan_changes_nothing(store, clock):
    schedule_job(store, "j", Every(timedelta(minutes=1)), MisfirePolicy(misfire="catch_up"))
    [state] = store.due_schedules().schedules
    clock.advance(5 * MINUTE)
    first = plan_schedule(state, clock())
    assert len(first.fire) == 5
    [won] = store.record_plans([first])
    assert won.applied and len(won.enqueued) == 5
    events = len(store.history(job_id="j", limit=200))
    # The same decision again (another planner read the same row): lost, nothing written.
    [lost] = store.record_plans([first])
    assert not lost.applied and lost.enqueued == () and lost.skipped == ()
    assert len(all_occurrences(store, "j")) == 5
    assert len(store.history(job_id="j", limit=200)) == events
    # A plan read before an edit loses against the edit.
    [stale] = store.due_schedules(now=clock() + 10 * MINUTE).schedules
    store.update_job("j", expected_revision=1, patch={"payload": {"v": 2}})
    [after_edit] = store.record_plans([plan_schedule(stale, clock() + 10 * MINUTE)])
    assert not after_edit.applied
    assert len(all_occurrences(store, "j")) == 5


def test_record_plans_is_per_job_and_in_input_order(store, clock):
    for name in ("b", "a", "c"):
        schedule_job(store, name, Every(timedelta(minutes=1)))
    states = {s.job.id: s for s in store.due_schedules().schedules}
    clock.advance(MINUTE)
    stale = plan_schedule(states["a"], clock())
    store.record_plans([stale])
    outcomes = store.record_plans(
        [plan_schedule(states["c"], clock()), stale, plan_schedule(states["b"], clock())]
    )
    assert [(o.job_id, o.applied) for o in outcomes] == [("c", True), ("a", False), ("b", True)]


def test_recent_skips_keep_the_newest_twenty(store, clock):
    schedule_job(store, "j", Every(timedelta(seconds=1)), MisfirePolicy(misfire="skip"))
    assert store.record_plans([]) == []
    for _ in range(RECENT_SKIPS_KEPT + 5):
        state = store.schedule_state("j")
        clock.advance(2 * MINUTE)
        [outcome] = store.record_plans([plan_schedule(state, clock())])
        assert outcome.applied and len(outcome.skipped) == 1
    state = store.schedule_state("j")
    assert len(state.recent_skips) == RECENT_SKIPS_KEPT
    skips = skip_events(store, "j")
    assert len(skips) == RECENT_SKIPS_KEPT + 5
    assert [s.scheduled_for for s in state.recent_skips] == [s["first"] for s in skips[5:]]


def test_once_slots_count_across_revisions(store, clock):
    at = clock() - 10 * MINUTE
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=at)
    schedule_job(store, "o", Once(moment))
    [state] = store.due_schedules().schedules
    [fired] = store.record_plans([plan_schedule(state, clock())])
    assert len(fired.enqueued) == 1
    # A plan that claims the same once slot again under a new revision: the store drops it.
    store.update_job("o", expected_revision=1, patch={"payload": 1})
    state = store.schedule_state("o")
    again = _plan(
        state, fire=[SlotFiring(at, f"once:{at}", at)], through=clock(), last=at, once=True
    )
    [outcome] = store.record_plans([again])
    assert outcome.applied and outcome.enqueued == () and outcome.skipped == ()
    assert len(all_occurrences(store, "o")) == 1


def test_bad_plans_are_refused_and_change_nothing(store, clock):
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    [state] = store.due_schedules().schedules
    good = _plan(state, through=clock())
    backwards = _plan(state, through=state.planned_through - 1)
    wrong_job_skip = _plan(state, skipped=[SkippedSlots("other", 1, 1, 1, "misfire", 1)])
    bad_reason = _plan(state, skipped=[SkippedSlots("j", 1, 1, 1, "late", 1)])  # type: ignore[arg-type]
    unordered = _plan(state, fire=[SlotFiring(5, "every:5", 5), SlotFiring(5, "every:5", 5)])
    for bad in (backwards, wrong_job_skip, bad_reason, unordered):
        with pytest.raises(InvalidArgument):
            store.record_plans([good, bad])
    with pytest.raises(InvalidArgument):
        store.record_plans([good, good])
    with pytest.raises(InvalidArgument):
        store.record_plans("not a list")  # type: ignore[arg-type]
    assert store.schedule_state("j") == state


def test_edits_and_disabling_keep_the_row_in_step(store, clock):
    schedule_job(store, "j", Cron("*/5 * * * *"))
    clock.advance(MINUTE)
    store.update_job("j", expected_revision=1, patch={"enabled": False})
    state = store.schedule_state("j")
    assert (state.revision, state.next_due_at, state.planned_through) == (2, None, clock())
    clock.advance(MINUTE)
    store.update_job("j", expected_revision=2, patch={"enabled": True})
    state = store.schedule_state("j")
    assert (state.revision, state.next_due_at, state.planned_through) == (3, clock(), clock())
    store.update_job("j", expected_revision=3, patch={"trigger": {}})
    assert store.schedule_state("j") is None
    assert store.due_schedules().schedules == ()
