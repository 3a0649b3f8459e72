"""Schedule overlap (SPEC §12): what a firing does while an earlier occurrence of the job is live —
allow, skip, buffer_one, cancel_other — decided by the store in the transaction that records the
plan, so any number of planners agree. On both stores, with the injected clock."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from jobledger import SchedulerError
from jobledger.planning.explain import explain
from jobledger.planning.planner import Planner
from jobledger.schedules import Every, MisfirePolicy, schedule_json
from tests.system.schedules.helpers import AUTHORITY, schedule_job

MINUTE = 60_000


def _job(store, clock, overlap: str, misfire: str = "coalesce") -> int:
    """A job every minute from the next whole minute; returns its first slot."""
    first = clock() - clock() % MINUTE + MINUTE
    policy = MisfirePolicy(misfire=misfire, overlap=overlap)  # type: ignore[arg-type]
    schedule_job(store, "tick", Every(timedelta(minutes=1)), policy)
    return first


def _tick_at(store, clock, instant: int):
    clock.advance(instant - clock())
    return Planner(store, clock=clock).tick()


def _live(store) -> list:
    page = store.list_occurrences(job_id="tick", limit=100).items
    return [o for o in page if o.status in ("queued", "retry_wait", "running")]


def _overlap_skips(store) -> list:
    state = store.schedule_state("tick")
    return [skip for skip in state.recent_skips if skip.reason == "overlap"]


def test_skip_fires_nothing_while_an_occurrence_is_live(store, clock):
    first = _job(store, clock, "skip")
    _tick_at(store, clock, first)
    [live] = _live(store)
    _tick_at(store, clock, first + MINUTE)
    _tick_at(store, clock, first + 2 * MINUTE)
    assert [o.id for o in _live(store)] == [live.id]
    skips = _overlap_skips(store)
    assert [(s.scheduled_for, s.count) for s in skips] == [
        (first + MINUTE, 1),
        (first + 2 * MINUTE, 1),
    ]
    claimed = store.claim_next(owner_id="w", lease_ms=600_000)
    assert claimed is not None and claimed.id == live.id
    _tick_at(store, clock, first + 3 * MINUTE)  # running is live too
    assert len(_overlap_skips(store)) == 3
    store.settle(occurrence_id=live.id, owner_id="w", fence=claimed.fence, outcome="succeeded")
    _tick_at(store, clock, first + 4 * MINUTE)
    [after] = _live(store)
    assert after.scheduled_for == first + 4 * MINUTE


def test_buffer_one_lets_one_wait_behind_the_running_one(store, clock):
    first = _job(store, clock, "buffer_one")
    _tick_at(store, clock, first)
    _tick_at(store, clock, first + MINUTE)  # the first still waits: this slot is skipped
    assert len(_live(store)) == 1 and len(_overlap_skips(store)) == 1
    claimed = store.claim_next(owner_id="w", lease_ms=600_000)
    assert claimed is not None
    _tick_at(store, clock, first + 2 * MINUTE)  # one running, none waiting: one more waits
    _tick_at(store, clock, first + 3 * MINUTE)  # one waiting already: skipped
    live = _live(store)
    assert sorted(o.status for o in live) == ["queued", "running"]
    assert [s.scheduled_for for s in _overlap_skips(store)] == [
        first + MINUTE,
        first + 3 * MINUTE,
    ]


def test_cancel_other_replaces_the_live_occurrences(store, clock):
    first = _job(store, clock, "cancel_other")
    _tick_at(store, clock, first)
    claimed = store.claim_next(owner_id="w", lease_ms=600_000)
    assert claimed is not None
    _tick_at(store, clock, first + MINUTE)
    old = store.get_occurrence(claimed.id)
    assert old.status == "cancelled"
    cancelled = [e for e in store.history(occurrence_id=claimed.id) if e.type.endswith("cancelled")]
    assert cancelled[-1].data["reason"] == "overlap"
    assert cancelled[-1].data["previousStatus"] == "running"
    [new] = _live(store)
    assert new.scheduled_for == first + MINUTE and new.status == "queued"
    # the cancelled attempt's worker learns it at its next settle (cooperative cancel)
    with pytest.raises(SchedulerError):
        store.settle(
            occurrence_id=claimed.id, owner_id="w", fence=claimed.fence, outcome="succeeded"
        )


def test_a_catch_up_pass_under_skip_fires_the_oldest_slot_and_skips_the_rest(store, clock):
    first = _job(store, clock, "skip", misfire="catch_up")
    report = _tick_at(store, clock, first + 4 * MINUTE + 30_000)  # five due slots in one pass
    live = _live(store)
    assert [o.scheduled_for for o in live] == [first]
    [run] = _overlap_skips(store)
    assert (run.scheduled_for, run.last, run.count) == (first + MINUTE, first + 4 * MINUTE, 4)
    assert report is not None


def test_allow_is_the_default_and_keeps_the_stored_bytes(store, clock):
    first = _job(store, clock, "allow")
    assert "overlap" not in store.get_job("tick").trigger
    _tick_at(store, clock, first)
    _tick_at(store, clock, first + MINUTE)
    assert len(_live(store)) == 2 and _overlap_skips(store) == []


def test_the_policy_travels_in_the_trigger_json_and_bad_values_are_refused(store):
    stored = schedule_json(Every(timedelta(minutes=1)), MisfirePolicy(overlap="skip"))
    assert stored["overlap"] == "skip"
    with pytest.raises(SchedulerError) as raised:
        MisfirePolicy(overlap="sometimes")  # type: ignore[arg-type]
    assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
    # "allow" is spelled by leaving the key out: one stored form per policy
    for bad in ("allow", "sometimes", 3):
        with pytest.raises(SchedulerError) as raised:
            store.create_job(
                id="bad", kind="tick", authority=AUTHORITY, trigger={**stored, "overlap": bad}
            )
        assert raised.value.code == "SCHEDULER_INVALID_ARGUMENT"
        assert "overlap" in str(raised.value)


def test_explain_names_the_policy_and_shows_overlap_skips(store, clock):
    first = _job(store, clock, "skip")
    _tick_at(store, clock, first)
    _tick_at(store, clock, first + MINUTE)
    text = explain(store, "tick").render()
    assert "overlap: skip" in text
    assert "overlap" in explain(store, "tick").to_dict()["recentSkips"][-1]["reason"]


def test_racing_planners_never_let_two_overlap(store_factory, clock):
    handles = [store_factory() for _ in range(4)]
    first = _job(handles[0], clock, "skip")
    for step in range(6):
        clock.advance(first + step * MINUTE - clock())
        barrier = threading.Barrier(len(handles))
        errors: list[BaseException] = []

        def tick(handle) -> None:
            try:
                barrier.wait()
                Planner(handle, clock=clock).tick()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=tick, args=(h,)) for h in handles]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert len(_live(handles[0])) == 1  # never a second one beside the live one
        if step == 2:  # the live one finishes: the next slot may fire
            [live] = _live(handles[0])
            claimed = handles[0].claim_next(owner_id="w", lease_ms=60_000)
            handles[0].settle(
                occurrence_id=live.id, owner_id="w", fence=claimed.fence, outcome="succeeded"
            )
    fired = handles[0].list_occurrences(job_id="tick", limit=100).items
    assert sorted(o.scheduled_for for o in fired) == [first, first + 3 * MINUTE]


def test_the_live_read_uses_the_status_index_never_the_jobs_history(backend, db_target, store):
    # SQLite would take the job's index (its whole history) unless the query pins the status
    # index; PostgreSQL chooses by its statistics (the same index once the job has a history).
    if backend != "sqlite":
        pytest.skip("the pinned plan is SQLite's")
    import sqlite3

    from jobledger.store.sqlite.store import QUERIES

    with sqlite3.connect(db_target) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + QUERIES["live_of_job"], {"job_id": "j", "kind": "k"}
        ).fetchall()
    assert "jobledger_occurrences_status (status=? AND kind=?)" in " ".join(str(r) for r in plan)
