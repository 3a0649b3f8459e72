"""Restarts, trigger edits, disabling and ``Once`` semantics, on every store."""

from __future__ import annotations

import json
from datetime import timedelta

from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every, MisfirePolicy, Once, schedule_json

from .helpers import (
    all_occurrences,
    assert_one_per_slot,
    at,
    expected_slots,
    move_to,
    raw_write,
    schedule_job,
    skip_events,
    utc,
)

EVERY_10S = Every(timedelta(seconds=10))
EVERY_15S = Every(timedelta(seconds=15))


def _run(planner_of, clock, steps, step_ms):
    for _ in range(steps):
        clock.advance(step_ms)
        planner_of().tick()


def test_a_restart_neither_repeats_nor_loses_a_slot(store_factory, clock):
    start = move_to(clock, utc(2026, 1, 1))
    first = store_factory()
    schedule_job(first, "j", EVERY_10S, MisfirePolicy(misfire="catch_up"))
    planner = Planner(first)
    planner.tick()
    _run(lambda: planner, clock, 7, 3_000)
    first.close()  # the process dies; a new one opens its own handle and planner
    clock.advance(4_000)
    second = store_factory()
    _run(lambda: Planner(second), clock, 9, 3_000)
    end = clock()
    assert assert_one_per_slot(second, "j") == expected_slots(EVERY_10S, start, end)


def test_planning_twice_at_one_instant_changes_nothing(store, clock):
    move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", EVERY_10S, MisfirePolicy(misfire="catch_up"))  # 3 due: all fire
    Planner(store).tick()
    clock.advance(30_000)
    assert len(Planner(store).tick().enqueued) == 3
    again = Planner(store).tick()
    assert (again.enqueued, again.skipped, again.planned_jobs) == ([], [], 0)


def test_a_trigger_edit_plans_from_the_edit_and_never_refires(store, clock):
    """Under revision 1 every slot up to the edit instant E fires (a pass runs at E); under
    revision 2 exactly the new trigger's slots strictly after E fire; no revision-1 slot after
    E ever fires, and nothing fires twice."""
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", EVERY_10S)
    planner = Planner(store)
    planner.tick()
    _run(lambda: planner, clock, 10, 4_000)  # to +40 s
    edit = clock.advance(1_000)  # +41 s
    planner.tick()
    store.update_job("j", expected_revision=1, patch={"trigger": schedule_json(EVERY_15S)})
    _run(lambda: planner, clock, 20, 4_000)  # to +121 s
    end = clock()
    occurrences = all_occurrences(store, "j")
    first = [o.scheduled_for for o in occurrences if o.job_revision == 1]
    second = [o.scheduled_for for o in occurrences if o.job_revision == 2]
    assert first == expected_slots(EVERY_10S, start, edit)
    assert second == expected_slots(EVERY_15S, edit, end)
    assert not [slot for slot in first if slot > edit]
    assert_one_per_slot(store, "j")


def test_slots_between_the_last_pass_and_an_edit_belong_to_no_revision(store, clock):
    """The documented edge: a slot of revision 1 that came due after the last planner pass but
    before the edit is superseded by the edit (revision 2 plans strictly after the edit)."""
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", EVERY_10S, MisfirePolicy(misfire="catch_up"))  # no coalescing
    planner = Planner(store)
    planner.tick()
    last_pass = clock.advance(5_000)
    planner.tick()
    edit = clock.advance(10_000)  # the slot at +10 s came due, no pass ran
    store.update_job("j", expected_revision=1, patch={"payload": {"v": 2}})
    clock.advance(20_000)
    report = planner.tick()
    assert report.skipped == []
    assert [(o.job_revision, o.scheduled_for) for o in all_occurrences(store, "j")] == [
        (2, slot) for slot in expected_slots(EVERY_10S, edit, clock())
    ]
    assert expected_slots(EVERY_10S, last_pass, edit) == [start + 10_000]


def test_disabling_stops_planning_and_enabling_plans_from_then(store, clock):
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", EVERY_10S, MisfirePolicy(misfire="catch_up"))
    planner = Planner(store)
    planner.tick()
    _run(lambda: planner, clock, 3, 10_000)  # +10, +20, +30 fire
    disabled = clock.advance(5_000)
    store.update_job("j", expected_revision=1, patch={"enabled": False})
    _run(lambda: planner, clock, 10, 10_000)
    assert planner.tick().next_due_at is None  # nothing is waiting for a planner
    enabled = clock.advance(5_000)
    store.update_job("j", expected_revision=2, patch={"enabled": True})
    _run(lambda: planner, clock, 3, 10_000)
    end = clock()
    occurrences = all_occurrences(store, "j")
    assert [(o.job_revision, o.scheduled_for) for o in occurrences] == [
        (1, slot) for slot in expected_slots(EVERY_10S, start, disabled)
    ] + [(3, slot) for slot in expected_slots(EVERY_10S, enabled, end)]
    assert skip_events(store, "j") == []  # the disabled stretch is not "missed"


def test_once_in_the_past_counts_for_a_new_job(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "fires", Once(at(now - 3_600_000)))
    schedule_job(store, "skips", Once(at(now - 3_600_000)), MisfirePolicy(misfire="skip"))
    report = Planner(store).tick()
    assert [(o.job_id, o.scheduled_for, o.trigger_key) for o in report.enqueued] == [
        ("fires", now - 3_600_000, f"once:{now - 3_600_000}")
    ]
    assert [(s.job_id, s.count, s.reason) for s in report.skipped] == [("skips", 1, "misfire")]
    clock.advance(60_000)
    again = Planner(store).tick()
    assert (again.enqueued, again.skipped) == ([], [])
    assert store.schedule_state("fires").next_due_at is None


def test_once_in_the_future_waits_then_fires_once(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "o", Once(at(now + 90_000)))
    planner = Planner(store)
    assert planner.tick().next_due_at == now + 90_000
    clock.advance(89_999)
    assert planner.tick().enqueued == []
    clock.advance(1)
    [occurrence] = planner.tick().enqueued
    assert occurrence.scheduled_for == now + 90_000
    clock.advance(3_600_000)
    assert planner.tick().enqueued == []


def test_editing_at_makes_a_new_slot_but_never_refires_an_old_one(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    a, b = now - 60_000, now - 30_000
    schedule_job(store, "o", Once(at(a)))
    planner = Planner(store)
    assert [o.scheduled_for for o in planner.tick().enqueued] == [a]
    store.update_job("o", expected_revision=1, patch={"trigger": schedule_json(Once(at(b)))})
    assert [o.scheduled_for for o in planner.tick().enqueued] == [b]  # a new slot counts
    store.update_job("o", expected_revision=2, patch={"trigger": schedule_json(Once(at(a)))})
    back = planner.tick()
    assert (back.enqueued, back.skipped) == ([], [])  # planned under revision 1: never again
    store.update_job("o", expected_revision=3, patch={"payload": {"new": True}})
    assert planner.tick().enqueued == []
    assert [(o.job_revision, o.scheduled_for) for o in all_occurrences(store, "o")] == [
        (1, a),
        (2, b),
    ]


def test_a_skipped_once_slot_is_not_skipped_or_fired_again(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    a, b = now - 600_000, now - 300_000
    schedule_job(store, "o", Once(at(a)), MisfirePolicy(misfire="skip"))
    planner = Planner(store)
    assert [s.scheduled_for for s in planner.tick().skipped] == [a]
    policy = MisfirePolicy(misfire="skip")
    store.update_job(
        "o", expected_revision=1, patch={"trigger": schedule_json(Once(at(b)), policy)}
    )
    assert [s.scheduled_for for s in planner.tick().skipped] == [b]
    # Back to a, now with a policy that would fire it: it was planned (skipped) already.
    store.update_job("o", expected_revision=2, patch={"trigger": schedule_json(Once(at(a)))})
    back = planner.tick()
    assert (back.enqueued, back.skipped) == ([], [])
    assert [event["first"] for event in skip_events(store, "o")] == [a, b]


def test_a_cron_edited_to_once_and_back(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", Cron("*/5 * * * *"))
    planner = Planner(store)
    planner.tick()
    clock.advance(300_000)
    assert len(planner.tick().enqueued) == 1
    store.update_job("j", expected_revision=1, patch={"trigger": schedule_json(Once(at(now)))})
    [once] = planner.tick().enqueued
    assert once.trigger_key == f"once:{now}"
    store.update_job(
        "j", expected_revision=2, patch={"trigger": schedule_json(Cron("*/5 * * * *"))}
    )
    clock.advance(300_000)
    assert [o.scheduled_for for o in planner.tick().enqueued] == [now + 600_000]


def test_a_schedule_this_version_cannot_read_is_parked_not_fatal(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "future", EVERY_10S)
    schedule_job(store, "fine", EVERY_10S)
    newer = json.dumps({**schedule_json(EVERY_10S), "version": 2}, separators=(",", ":"))
    raw_write(store, "UPDATE jobs SET trigger_json = ? WHERE job_id = ?", (newer, "future"))
    clock.advance(10_000)
    report = Planner(store).tick()
    assert report.unreadable == ["future"]
    assert [o.job_id for o in report.enqueued] == ["fine"]
    assert store.schedule_state("future").next_due_at == clock() + 3_600_000
    assert store.schedule_state("future").planned_through == now  # nothing decided
    assert Planner(store).tick().unreadable == []  # not looked at again for an hour
