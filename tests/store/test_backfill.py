"""Backfill (SPEC §12): every slot of a schedule in [start, end) that has no occurrence yet, once —
repeated, concurrent, beside the planner and across revisions; capped and audited. Both stores."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from jobledger import SchedulerError
from jobledger.models import MAX_BACKFILL_SLOTS
from jobledger.planning.backfill import backfill
from jobledger.planning.declare import declare_schedule
from jobledger.planning.planner import Planner

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}
HOUR = 3_600_000
ANCHOR = datetime(2020, 1, 1, tzinfo=UTC)  # well before every range below


def _hourly(store, job_id: str = "report", **options) -> None:
    declare_schedule(
        store,
        job_id,
        "report",
        authority=AUTHORITY,
        every=timedelta(hours=1),
        anchor=ANCHOR,
        **options,
    )


def _day(days_ago: int, clock) -> tuple[int, int]:
    start = clock() - clock() % (24 * HOUR) - days_ago * 24 * HOUR
    return start, start + 24 * HOUR


def test_a_backfill_enqueues_each_missing_slot_once_and_is_audited(store, clock):
    _hourly(store)
    start, end = _day(3, clock)
    made = backfill(store, "report", start=start, end=end, actor="ops:ada")
    assert [o.scheduled_for for o in made] == list(range(start, end, HOUR))
    assert all(o.status == "queued" and o.trigger_key == f"every:{o.scheduled_for}" for o in made)
    assert backfill(store, "report", start=start, end=end, actor="ops:ada") == []
    # A wider range creates only the slots it adds.
    wider = backfill(store, "report", start=start - 2 * HOUR, end=end + HOUR, actor="ops:ada")
    assert [o.scheduled_for for o in wider] == [start - 2 * HOUR, start - HOUR, end]
    records = [r for r in store.audit_log(limit=50) if r.action == "schedule_backfilled"]
    assert len(records) == 3
    newest = records[0]
    assert newest.actor == "ops:ada" and newest.subject == "report"
    assert newest.data["created"] in (0, 3) and {"start", "end", "slots"} <= set(newest.data)
    assert sorted(r.data["created"] for r in records) == [0, 3, 24]
    assert store.verify().ok


def test_slots_the_planner_fired_under_an_earlier_revision_are_not_backfilled_again(store, clock):
    _hourly(store)
    clock.advance(timedelta(hours=1))
    Planner(store, clock=clock).tick()  # fires the slot that came due
    planned = list(store.list_occurrences(job_id="report").items)
    assert planned
    slot = planned[0].scheduled_for
    _hourly(store, payload={"v": 2})  # a new revision: ids of new slots differ from old ones
    assert store.get_job("report").revision == 2
    made = backfill(store, "report", start=slot - 2 * HOUR, end=slot + HOUR, actor="ops")
    assert [o.scheduled_for for o in made] == [slot - 2 * HOUR, slot - HOUR]
    assert all(o.job_revision == 2 for o in made)


def test_concurrent_backfills_create_each_slot_once(store, store_factory, clock):
    _hourly(store)
    start, end = _day(10, clock)
    others = [store_factory() for _ in range(3)]
    results: list[object] = []
    barrier = threading.Barrier(len(others))

    def run(handle) -> None:
        barrier.wait()
        try:
            results.append(backfill(handle, "report", start=start, end=end, actor="ops"))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=run, args=(handle,)) for handle in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(isinstance(r, list) for r in results), results
    created = [o.scheduled_for for r in results for o in r]  # type: ignore[union-attr]
    assert sorted(created) == list(range(start, end, HOUR))
    counts = {row.status: row.count for row in store.count_occurrences()}
    assert counts == {"queued": 24}


def test_bad_backfills_are_refused_and_change_nothing(store, clock):
    _hourly(store)
    store.create_job(id="manual", kind="k", authority=AUTHORITY)
    start, end = _day(1, clock)
    cases = [
        ({"job_id": "report", "start": end, "end": start}, "SCHEDULER_INVALID_ARGUMENT"),
        ({"job_id": "report", "start": start, "end": start}, "SCHEDULER_INVALID_ARGUMENT"),
        ({"job_id": "nope", "start": start, "end": end}, "SCHEDULER_NOT_FOUND"),
        ({"job_id": "manual", "start": start, "end": end}, "SCHEDULER_INVALID_ARGUMENT"),
        (
            {"job_id": "report", "start": datetime(2023, 1, 1), "end": end},  # naive: ambiguous
            "SCHEDULER_INVALID_ARGUMENT",
        ),
        (  # one slot past the cap
            {"job_id": "report", "start": start - MAX_BACKFILL_SLOTS * HOUR, "end": start + HOUR},
            "SCHEDULER_INVALID_ARGUMENT",
        ),
    ]
    for arguments, code in cases:
        job_id = arguments.pop("job_id")
        with pytest.raises(SchedulerError) as raised:
            backfill(store, job_id, actor="ops", **arguments)
        assert raised.value.code == code, (job_id, arguments)
    assert str(MAX_BACKFILL_SLOTS) in _cap_message(store, clock)
    _hourly(store, enabled=False)
    with pytest.raises(SchedulerError) as raised:
        backfill(store, "report", start=start, end=end, actor="ops")
    assert raised.value.code == "SCHEDULER_JOB_DISABLED"
    assert sum(row.count for row in store.count_occurrences()) == 0
    assert not [r for r in store.audit_log(limit=50) if r.action == "schedule_backfilled"]


def _cap_message(store, clock) -> str:
    start, _ = _day(1, clock)
    try:
        backfill(
            store, "report", start=start - MAX_BACKFILL_SLOTS * HOUR, end=start + HOUR, actor="ops"
        )
    except SchedulerError as exc:
        return str(exc)
    raise AssertionError("the cap was not enforced")


def test_exactly_the_cap_is_allowed(store, clock):
    _hourly(store)
    start, _ = _day(1, clock)
    made = backfill(
        store, "report", start=start - MAX_BACKFILL_SLOTS * HOUR, end=start, actor="ops"
    )
    assert len(made) == MAX_BACKFILL_SLOTS


def test_a_stale_revision_is_a_conflict_at_the_store(store, clock):
    _hourly(store)
    start, end = _day(1, clock)
    with pytest.raises(SchedulerError) as raised:
        store.record_backfill(
            "report", expected_revision=7, fire=[], start=start, end=end, actor="ops"
        )
    assert raised.value.code == "SCHEDULER_REVISION_CONFLICT"
