"""``explain``: next fire times with DST notes, planning state, skips and the current lease."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from jobledger import NotFound
from jobledger.planning.explain import explain
from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every, MisfirePolicy, Once

from .helpers import AUTHORITY, at, move_to, ms, schedule_job, utc

NY = "America/New_York"


def test_dst_notes_for_a_daily_job_around_spring_forward(store, clock):
    move_to(clock, utc(2026, 3, 6, 12))
    schedule_job(store, "nightly", Cron("30 2 * * *", timezone=NY), kind="report")
    Planner(store).tick()
    move_to(clock, utc(2026, 3, 7, 12))
    Planner(store).tick()
    explained = explain(store, "nightly", count=3)
    assert explained.is_schedule and explained.enabled and explained.revision == 1
    assert explained.schedule == "at 02:30 every day (America/New_York)"
    assert explained.now == utc(2026, 3, 7, 12)
    assert explained.next_fire_times == [
        utc(2026, 3, 8, 7, 0),  # 02:30 does not exist: shifted to 03:00 EDT
        utc(2026, 3, 9, 6, 30),
        utc(2026, 3, 10, 6, 30),
    ]
    assert explained.notes == [
        "shifted: 02:30 does not exist on 2026-03-08 in America/New_York; fires at 03:00"
    ]
    assert explained.last_planned == utc(2026, 3, 7, 7, 30)
    assert explained.misfire == MisfirePolicy()
    assert explained.status == "queued" and explained.lease_owner is None
    assert explained.current_occurrence.scheduled_for == ms(utc(2026, 3, 7, 7, 30))
    assert explained.recent_skips == [] and explained.remarks == []
    assert explained.next_due_at == utc(2026, 3, 8, 7, 0)
    text = explained.render()
    assert "2026-03-08 07:00:00 UTC  (2026-03-08 03:00 America/New_York)" in text
    assert "note: shifted: 02:30 does not exist on 2026-03-08" in text


def test_to_dict_is_json(store, clock):
    move_to(clock, utc(2026, 3, 6, 12))
    schedule_job(
        store,
        "nightly",
        Cron("30 2 * * *", timezone=NY),
        MisfirePolicy(misfire="skip", jitter=timedelta(seconds=10)),
    )
    Planner(store).tick()
    move_to(clock, utc(2026, 3, 9, 12))
    Planner(store).tick()
    data = json.loads(json.dumps(explain(store, "nightly").to_dict()))
    assert data["jobId"] == "nightly" and data["isSchedule"] is True
    assert data["nextFireTimes"][0] == "2026-03-10T06:30:00Z"
    assert data["misfire"] == {
        "misfire": "skip",
        "misfireGraceMs": 60000,
        "catchUpLimit": 100,
        "jitterMs": 10000,
    }
    assert data["trigger"]["misfire"] == "skip"
    assert data["recentSkips"] == [
        {
            "first": "2026-03-07T07:30:00Z",
            "last": "2026-03-09T06:30:00Z",
            "count": 3,
            "reason": "misfire",
            "revision": 1,
            "recordedAt": "2026-03-09T12:00:00Z",
        }
    ]
    assert data["lastPlanned"] == "2026-03-09T06:30:00Z"
    assert data["currentOccurrence"] is None


def test_the_lease_holder_of_the_current_occurrence(store, clock):
    move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    Planner(store).tick()
    clock.advance(60_000)
    [occurrence] = Planner(store).tick().enqueued
    claimed = store.claim_occurrence(
        occurrence_id=occurrence.id, owner_id="worker-7", lease_ms=30_000
    )
    assert claimed is not None
    explained = explain(store, "j")
    assert explained.status == "running"
    assert explained.lease_owner == "worker-7"
    assert explained.lease_expires_at == at(clock() + 30_000)
    assert "lease: held by worker-7 until" in explained.render()
    assert explained.to_dict()["currentOccurrence"]["leaseOwner"] == "worker-7"


def test_skips_are_listed_newest_first(store, clock):
    move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    Planner(store).tick()
    for _ in range(3):
        clock.advance(10 * 60_000)
        Planner(store).tick()
    skips = explain(store, "j").recent_skips
    assert [s.reason for s in skips] == ["coalesced"] * 3
    assert skips[0].scheduled_for > skips[1].scheduled_for > skips[2].scheduled_for
    assert all(s.count == 9 for s in skips)


def test_slots_waiting_for_a_planner_are_pointed_out(store, clock):
    move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    Planner(store).tick()
    clock.advance(5 * 60_000 + 1)
    [remark] = explain(store, "j").remarks
    assert remark.startswith("5 slots after 2026-01-01 00:00:00 UTC are due but not planned")


def test_a_job_that_is_not_a_schedule(store, clock):
    store.create_job(id="manual", kind="email", authority=AUTHORITY, trigger={"mine": True})
    explained = explain(store, "manual")
    assert not explained.is_schedule
    assert explained.next_fire_times == [] and explained.schedule is None
    assert "not a jobledger schedule" in explained.remarks[0]
    assert explained.to_dict()["isSchedule"] is False
    with pytest.raises(NotFound):
        explain(store, "missing")


def test_disabled_and_once_jobs(store, clock):
    now = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "off", Every(timedelta(minutes=1)), enabled=False)
    off = explain(store, "off")
    assert off.next_fire_times == [] and not off.enabled
    assert off.remarks == ["disabled: no slot is planned until the job is enabled again"]
    schedule_job(store, "later", Once(at(now + 3_600_000)))
    schedule_job(store, "past", Once(at(now - 1_000)))
    assert explain(store, "later").next_fire_times == [at(now + 3_600_000)]
    assert explain(store, "later").schedule == "once at 2026-01-01 01:00:00 UTC"
    assert "waits for the next planner pass" in explain(store, "past").remarks[0]
    Planner(store).tick()
    done = explain(store, "past")
    assert done.next_fire_times == [] and "never fires again" in done.remarks[0]
    assert done.last_planned == at(now - 1_000)


def test_count_is_bounded(store, clock):
    schedule_job(store, "j", Every(timedelta(minutes=1)))
    assert len(explain(store, "j", count=100).next_fire_times) == 100
    with pytest.raises(Exception) as info:
        explain(store, "j", count=101)
    assert info.value.code == "SCHEDULER_INVALID_ARGUMENT"
