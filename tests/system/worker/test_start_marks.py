"""A worker's claims held ahead are marked started, durably, before their handlers run — and a
lost worker's unstarted claims are given back, never spent, dead-lettered or adjudicated (issue
30, items 1 and 5). Both stores.

Before, a claim spent an attempt and the store could not tell a buffered claim from a started
one: after a crash every claimed-ahead occurrence on its final attempt became a ``lease_expired``
dead letter (or, under ``on_lost_lease="adjudicate"``, an outcome-unknown case) though its handler
never began.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.testing import FakeClock

from .conftest import AUTHORITY, LEASE_MS, RuntimeFactory
from .test_worker_store import FAST_POLL, WAIT_S, Running, _Spy, wait_until


@pytest.fixture
def store(any_store: jobledger.Store) -> jobledger.Store:
    return any_store


@pytest.fixture
def observer(any_target: str, clock: FakeClock):
    """Another handle on the database: it sees only what was committed."""
    with jobledger.open_store(any_target, clock=clock) as opened:
        yield opened


def _jobs(store: jobledger.Store, clock: FakeClock, n: int, **job: Any) -> list[str]:
    store.create_job(id="pay", kind="pay", authority=AUTHORITY, **job)
    made = store.enqueue_batch(
        [
            jobledger.EnqueueRequest(job_id="pay", scheduled_for=clock(), trigger_key=f"t{i}")
            for i in range(n)
        ]
    )
    return [occurrence.id for occurrence in made]


@pytest.mark.parametrize(("concurrency", "prefetch"), [(1, 8), (3, None)])
def test_no_handler_runs_before_its_start_mark_is_committed(
    store, observer, clock, make_runtime: RuntimeFactory, concurrency, prefetch
):
    ids = _jobs(store, clock, 40, max_attempts=1)
    seen: list[tuple[str, int, int | None]] = []

    def pay(ctx: jobledger.JobContext) -> None:
        committed = observer.get_occurrence(ctx.occurrence_id)
        assert committed is not None
        seen.append((ctx.occurrence_id, committed.fence, committed.started_at))

    worker = jobledger.Worker(
        make_runtime({"pay": pay}),
        concurrency=concurrency,
        prefetch=prefetch,
        poll_interval=FAST_POLL,
        planner=False,
    )
    running = Running(worker)
    try:
        wait_until(lambda: worker.summary.statuses["succeeded"] == 40, "the drain")
    finally:
        running.stop()
    assert sorted(occurrence for occurrence, _, _ in seen) == sorted(ids)
    assert all(started is not None for _, _, started in seen), seen
    # Claims held ahead were marked by a settle's transaction, not by their claim.
    assert store.events(event_type="occurrence_started", limit=100)


def test_a_slot_marks_its_next_claim_in_the_settle_that_frees_it(
    store, clock, make_runtime: RuntimeFactory
):
    _jobs(store, clock, 12)
    calls: list[tuple[int, int]] = []

    def settle_batch(settlements: list[jobledger.Settlement], **kw: Any) -> Any:
        calls.append((len(settlements), len(kw.get("starts", ()))))
        return store.settle_batch(settlements, **kw)

    runtime = make_runtime({"pay": lambda ctx: None})
    runtime.store = _Spy(store, settle_batch=settle_batch)
    worker = jobledger.Worker(
        runtime, concurrency=1, prefetch=20, poll_interval=FAST_POLL, planner=False
    )
    running = Running(worker)
    try:
        wait_until(lambda: worker.summary.statuses["succeeded"] == 12, "the drain")
    finally:
        summary = running.stop()
    # One claim took all twelve and marked the first (for the idle slot); each later one was
    # marked with the settle before it: no transaction of its own.
    assert [o.started_at for o in store.list_occurrences(limit=20).items].count(clock()) == 12
    assert calls == [(1, 1)] * 11 + [(1, 0)]
    assert summary.settle_transactions == 12
    assert len(store.events(event_type="occurrence_started", limit=100)) == 11


@pytest.mark.parametrize("how", ["reaped", "expired"])
@pytest.mark.parametrize("policy", ["retry", "adjudicate"])
def test_a_lost_workers_buffered_claims_are_given_back_not_dead_lettered(
    backend, store, observer, clock, make_runtime: RuntimeFactory, policy, how
):
    """The worker is lost with one handler running and five claims buffered (it stops renewing:
    its heartbeat is manual): a reaper ends its leases (``reaped``), or they run out
    (``expired``; PostgreSQL — on SQLite the live worker's lock file keeps its expired leases
    its own); another worker's claim recovers them."""
    if how == "expired" and backend == "sqlite":
        pytest.skip("a live owner's expired leases stay its own on SQLite (clock steps)")
    ids = _jobs(store, clock, 6, max_attempts=1, on_lost_lease=policy)
    began, release = [], threading.Event()

    def pay(ctx: jobledger.JobContext) -> None:
        began.append(ctx.occurrence_id)
        release.wait(WAIT_S)

    worker = jobledger.Worker(
        make_runtime({"pay": pay}, owner_id="victim"),
        concurrency=1,
        prefetch=5,
        poll_interval=FAST_POLL,
        planner=False,
    )
    running = Running(worker)
    try:
        wait_until(lambda: len(began) == 1, "the first handler")
        wait_until(
            lambda: [(h.owner_id, h.leases) for h in store.lease_holders()] == [("victim", 6)],
            "the buffer full",
        )
        if how == "reaped":
            ended = observer.expire_leases_of("victim", reason="owner_gone")
            assert [o.status for o in ended].count("retry_wait") == 5
        else:
            clock.advance(timedelta(milliseconds=LEASE_MS + 1))
        taken = observer.claim_batch(owner_id="survivor", lease_ms=LEASE_MS, limit=10, start=0)
        [dead] = store.list_dead_letters()
        assert dead.id == began[0]
        assert dead.last_error["code"] == (
            "SCHEDULER_OUTCOME_UNKNOWN" if policy == "adjudicate" else "lease_expired"
        )
        assert sorted(o.id for o in taken) == sorted(set(ids) - {began[0]})
        assert {(o.attempt, o.reclaimed) for o in taken} == {(1, False)}  # given back, not spent
        cases = store.adjudication_cases()
        assert [c.occurrence_id for c in cases] == ([began[0]] if policy == "adjudicate" else [])
        if cases:
            assert cases[0].started_at is not None
    finally:
        release.set()
        running.stop()


def test_run_claimed_marks_a_claim_held_ahead_before_its_handler(
    store, observer, clock, make_runtime: RuntimeFactory
):
    _jobs(store, clock, 2)
    seen: list[int | None] = []

    def pay(ctx: jobledger.JobContext) -> None:
        seen.append(observer.get_occurrence(ctx.occurrence_id).started_at)

    runtime = make_runtime({"pay": pay})
    claimed = runtime.claim_batch(2, start=0)
    assert [o.started_at for o in claimed] == [None, None]
    results = [runtime.run_claimed(occurrence) for occurrence in claimed]
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    assert seen == [clock(), clock()]


def test_a_claim_lost_before_its_mark_never_starts_its_handler(
    store, observer, clock, make_runtime: RuntimeFactory
):
    _jobs(store, clock, 1)
    began: list[str] = []
    runtime = make_runtime({"pay": lambda ctx: began.append(ctx.occurrence_id)})
    [claimed] = runtime.claim_batch(1, start=0)
    clock.advance(timedelta(milliseconds=LEASE_MS + 1))
    assert observer.claim_batch(owner_id="other", lease_ms=LEASE_MS, limit=1)  # given back, taken
    result = runtime.run_claimed(claimed)
    assert (result.status, result.lease_lost, began) == ("aborted", True, [])
