"""Misfire policies, the grace boundary, jitter and huge backlogs, on every store.

The scenario of the first tests: a worker (and so its planner) is down for three days across
New York's spring-forward night (2026-03-08, 02:00 EST → 03:00 EDT = 07:00Z) and comes back.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from jobledger.planning.planner import COUNT_CAP, Planner
from jobledger.schedules import Cron, Every, MisfirePolicy, jitter_offset_ms

from .helpers import (
    all_occurrences,
    assert_one_per_slot,
    expected_slots,
    move_to,
    ms,
    schedule_job,
    skip_events,
    utc,
)

NY = "America/New_York"
DOWN = utc(2026, 3, 6, 12)
BACK = utc(2026, 3, 9, 12)
DAILY = Cron("30 2 * * *", timezone=NY)  # fixed-time: 02:30 on the 8th is shifted to 03:00 EDT
HOURLY = Cron("0 * * * *", timezone=NY)  # every real hour (the missing 02:00 simply isn't one)
DAILY_SLOTS = [ms(utc(2026, 3, 7, 7, 30)), ms(utc(2026, 3, 8, 7, 0)), ms(utc(2026, 3, 9, 6, 30))]


def _down_three_days(store, clock, policy):
    """Create the jobs while the planner runs, stop it for three days, run one tick."""
    move_to(clock, DOWN)
    schedule_job(store, "daily", DAILY, policy)
    schedule_job(store, "hourly", HOURLY, policy)
    planner = Planner(store)
    first = planner.tick()
    assert first.enqueued == [] and first.skipped == [] and first.planned_jobs == 2
    move_to(clock, BACK)
    return planner.tick()


def _runs(report, job_id):
    return [
        (s.scheduled_for, s.last, s.count, s.reason) for s in report.skipped if s.job_id == job_id
    ]


def test_the_scenario_has_the_slots_we_think(clock):
    assert expected_slots(DAILY, ms(DOWN), ms(BACK)) == DAILY_SLOTS
    hourly = expected_slots(HOURLY, ms(DOWN), ms(BACK))
    assert len(hourly) == 72  # 72 real hours, although 02:00 on the 8th never happens
    assert hourly[-1] == ms(BACK)  # due exactly now: within the grace


def test_coalesce_fires_the_latest_due_slot_once(store, clock):
    report = _down_three_days(store, clock, None)
    hourly = expected_slots(HOURLY, ms(DOWN), ms(BACK))
    assert sorted((o.job_id, o.scheduled_for) for o in report.enqueued) == [
        ("daily", DAILY_SLOTS[-1]),
        ("hourly", hourly[-1]),
    ]
    assert _runs(report, "daily") == [(DAILY_SLOTS[0], DAILY_SLOTS[1], 2, "coalesced")]
    assert _runs(report, "hourly") == [(hourly[0], hourly[-2], 71, "coalesced")]
    assert [o.scheduled_for for o in all_occurrences(store, "daily")] == [DAILY_SLOTS[-1]]
    assert report.skipped == sorted(report.skipped, key=lambda s: s.scheduled_for)


def test_catch_up_fires_every_missed_slot_oldest_first(store, clock):
    report = _down_three_days(store, clock, MisfirePolicy(misfire="catch_up"))
    hourly = expected_slots(HOURLY, ms(DOWN), ms(BACK))
    daily = [o.scheduled_for for o in report.enqueued if o.job_id == "daily"]
    assert daily == DAILY_SLOTS  # the shifted 03:00 EDT slot of the 8th included
    assert [o.scheduled_for for o in report.enqueued if o.job_id == "hourly"] == hourly
    assert report.skipped == []
    assert assert_one_per_slot(store, "hourly") == hourly


def test_catch_up_limit_skips_the_oldest(store, clock):
    report = _down_three_days(store, clock, MisfirePolicy(misfire="catch_up", catch_up_limit=2))
    hourly = expected_slots(HOURLY, ms(DOWN), ms(BACK))
    assert [o.scheduled_for for o in report.enqueued if o.job_id == "daily"] == DAILY_SLOTS[1:]
    assert _runs(report, "daily") == [(DAILY_SLOTS[0], DAILY_SLOTS[0], 1, "catch_up_limit")]
    # 71 missed hours: the newest 2 fire, then the one due now (within the grace) fires too.
    assert [o.scheduled_for for o in report.enqueued if o.job_id == "hourly"] == hourly[-3:]
    assert _runs(report, "hourly") == [(hourly[0], hourly[-4], 69, "catch_up_limit")]


def test_skip_fires_nothing_missed_but_what_is_within_the_grace(store, clock):
    report = _down_three_days(store, clock, MisfirePolicy(misfire="skip"))
    hourly = expected_slots(HOURLY, ms(DOWN), ms(BACK))
    assert [(o.job_id, o.scheduled_for) for o in report.enqueued] == [("hourly", hourly[-1])]
    assert _runs(report, "daily") == [(DAILY_SLOTS[0], DAILY_SLOTS[-1], 3, "misfire")]
    assert _runs(report, "hourly") == [(hourly[0], hourly[-2], 71, "misfire")]
    assert skip_events(store, "daily") == [
        {
            "first": DAILY_SLOTS[0],
            "last": DAILY_SLOTS[-1],
            "count": 3,
            "reason": "misfire",
            "revision": 1,
        }
    ]
    assert all_occurrences(store, "daily") == []


def test_after_the_outage_planning_is_ordinary_again(store, clock):
    report = _down_three_days(store, clock, MisfirePolicy(misfire="skip"))
    assert report.next_due_at == ms(utc(2026, 3, 9, 13))
    planner = Planner(store)
    fired = []
    for half_hour in range(1, 49):  # a planner pass 10 s after every half hour for a day
        move_to(clock, BACK + timedelta(minutes=30 * half_hour, seconds=10))
        tick = planner.tick()
        assert tick.skipped == []
        fired += [(o.job_id, o.scheduled_for) for o in tick.enqueued]
    assert [slot for job, slot in fired if job == "daily"] == [ms(utc(2026, 3, 10, 6, 30))]
    assert [slot for job, slot in fired if job == "hourly"] == expected_slots(
        HOURLY, ms(BACK), ms(BACK + timedelta(hours=24))
    )


@pytest.mark.parametrize("misfire", ["coalesce", "catch_up", "skip"])
def test_exactly_the_grace_is_not_missed(store, clock, misfire):
    policy = MisfirePolicy(misfire=misfire, misfire_grace=timedelta(seconds=30))
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "on-time", Every(timedelta(minutes=1)), policy)
    Planner(store).tick()
    # At +90 s the slot at +60 s is exactly the grace (30 s) late: not missed.
    move_to(clock, start + 90_000)
    on_time = Planner(store).tick()
    assert [o.scheduled_for for o in on_time.enqueued if o.job_id == "on-time"] == [start + 60_000]
    assert on_time.skipped == []
    # 1 ms more than the grace: missed.
    schedule_job(store, "missed", Every(timedelta(minutes=1)), policy)
    Planner(store).tick()
    move_to(clock, start + 150_001)  # the slot at +120 s is 30.001 s late
    report = Planner(store).tick()
    fired = [o.scheduled_for for o in report.enqueued if o.job_id == "missed"]
    runs = [(s.scheduled_for, s.reason) for s in report.skipped if s.job_id == "missed"]
    if misfire == "skip":
        assert (fired, runs) == ([], [(start + 120_000, "misfire")])
    else:  # a lone missed slot fires under coalesce and catch_up
        assert (fired, runs) == ([start + 120_000], [])


@pytest.mark.parametrize("misfire", ["coalesce", "catch_up", "skip"])
def test_a_restart_within_the_grace(store, clock, misfire):
    """A planner back after 58 s (the demo worker stopped and started again) finds eleven due
    slots of an every-5-seconds job, all within the one-minute grace: under coalesce they are
    one run (SPEC §6), under catch_up and skip they all fire (none is missed)."""
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "beat", Every(timedelta(seconds=5)), MisfirePolicy(misfire=misfire))
    planner = Planner(store)
    planner.tick()
    move_to(clock, start + 58_000)
    report = planner.tick()
    due = list(range(start + 5_000, start + 58_000, 5_000))
    assert len(due) == 11
    fired = [o.scheduled_for for o in report.enqueued]
    runs = [(s.scheduled_for, s.last, s.count, s.reason) for s in report.skipped]
    if misfire == "coalesce":
        assert fired == [due[-1]]
        assert runs == [(due[0], due[-2], 10, "coalesced")]
    else:
        assert (fired, runs) == (due, [])
    assert [o.scheduled_for for o in all_occurrences(store, "beat")] == fired
    # And on time again afterwards: the next pass, at the next slot, fires just that slot.
    move_to(clock, start + 60_000)
    assert [o.scheduled_for for o in planner.tick().enqueued] == [start + 60_000]


def test_jitter_delays_availability_deterministically_and_keeps_the_identity(store, clock):
    jitter = timedelta(seconds=45)
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "spread", Every(timedelta(minutes=1)), MisfirePolicy(jitter=jitter))
    planner = Planner(store)
    planner.tick()
    occurrences = []
    for _ in range(30):
        clock.advance(60_000)
        occurrences += planner.tick().enqueued
    assert len(occurrences) == 30
    offsets = set()
    for occurrence in occurrences:
        slot = occurrence.scheduled_for
        assert slot % 60_000 == 0 and occurrence.trigger_key == f"every:{slot}"
        offset = occurrence.available_at - slot
        assert 0 <= offset < 45_000
        assert offset == jitter_offset_ms("spread", slot, 45_000)
        offsets.add(offset)
    assert len(offsets) > 20  # spread out, not one constant delay
    assert start + 60_000 == occurrences[0].scheduled_for


def test_jitter_is_the_same_in_another_store(store, clock, tmp_path):
    import jobledger

    move_to(clock, utc(2026, 1, 1))
    other = jobledger.open_store(tmp_path / "other.sqlite3", clock=clock)
    try:
        for target in (store, other):
            schedule_job(
                target,
                "spread",
                Every(timedelta(minutes=1)),
                MisfirePolicy(jitter=timedelta(minutes=5)),
            )
            Planner(target).tick()
        clock.advance(60_000)
        mine = Planner(store).tick().enqueued
        theirs = Planner(other).tick().enqueued
        assert [(o.id, o.available_at) for o in mine] == [(o.id, o.available_at) for o in theirs]
    finally:
        other.close()


def test_six_months_of_an_every_second_cron_coalesce_quickly(store, clock):
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "cron", Cron("* * * * * *"))
    schedule_job(store, "every", Every(timedelta(seconds=1)))
    Planner(store).tick()
    end = move_to(clock, utc(2026, 7, 1))
    began = time.perf_counter()
    report = Planner(store).tick()
    elapsed = time.perf_counter() - began
    assert elapsed < 1.0, f"planning six months of seconds took {elapsed:.3f} s"
    assert sorted((o.job_id, o.scheduled_for) for o in report.enqueued) == [
        ("cron", end),
        ("every", end),
    ]
    runs = {s.job_id: s for s in report.skipped}
    seconds = (end - start) // 1000  # 15,638,400 slots after the start, the last one fired
    assert (runs["cron"].scheduled_for, runs["cron"].last) == (start + 1000, end - 1000)
    assert runs["cron"].count is None  # more than COUNT_CAP: not walked
    assert seconds - 1 > COUNT_CAP
    assert (runs["every"].count, runs["every"].reason) == (seconds - 1, "coalesced")  # arithmetic


def test_a_catch_up_backlog_is_planned_in_bounded_passes(store, clock):
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(
        store,
        "j",
        Every(timedelta(seconds=1)),
        MisfirePolicy(misfire="catch_up", catch_up_limit=2_500),
    )
    Planner(store).tick()
    end = move_to(clock, utc(2026, 1, 2))
    report = Planner(store).tick()
    fired = [o.scheduled_for for o in report.enqueued]
    # The 2,500 newest missed slots, then the 61 within the (default) one-minute grace.
    missed_last = end - 61_000
    assert fired == list(range(missed_last - 2_499_000, end + 1, 1000))
    [run] = report.skipped
    assert (run.scheduled_for, run.last, run.reason) == (
        start + 1000,
        missed_last - 2_500_000,
        "catch_up_limit",
    )
    assert run.count == (missed_last - 2_500_000 - start) // 1000
    assert assert_one_per_slot(store, "j") == fired
    assert report.planned_jobs == 1
