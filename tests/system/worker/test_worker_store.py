"""Real workers (threads) on both stores: rolling deploys, the prefetch bound, and how many
transactions a drain takes (issues 8 and 10)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import FakeClock

from .conftest import AUTHORITY, RuntimeFactory, stop_worker

WAIT_S = 30.0
FAST_POLL = timedelta(milliseconds=20)


@pytest.fixture
def store(any_store: jobledger.Store) -> jobledger.Store:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_store


@pytest.fixture
def second_store(any_target: str, clock: FakeClock) -> Iterator[jobledger.Store]:
    """Another handle on the same database, as another process would have."""
    with jobledger.open_store(any_target, clock=clock) as opened:
        yield opened


class Running:
    """A worker running in a thread."""

    def __init__(self, worker: jobledger.Worker) -> None:
        self.worker = worker
        self.box: list[jobledger.WorkerSummary] = []
        self.thread = threading.Thread(
            target=lambda: self.box.append(worker.run(install_signal_handlers=False)),
            daemon=True,
        )
        self.thread.start()
        assert worker.wait_until_running(WAIT_S)

    def stop(self) -> jobledger.WorkerSummary:
        stop_worker(self.worker, self.thread)
        assert not self.thread.is_alive()
        [summary] = self.box
        return summary


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


def enqueue(store: jobledger.Store, clock: FakeClock, job_id: str, kind: str, count: int) -> None:
    store.create_job(id=job_id, kind=kind, authority=AUTHORITY)
    store.enqueue_batch(
        [
            jobledger.EnqueueRequest(job_id=job_id, scheduled_for=clock(), trigger_key=f"t{n}")
            for n in range(count)
        ]
    )


def statuses(store: jobledger.Store) -> dict[tuple[str, str], int]:
    return {(c.kind, c.status): c.count for c in store.count_occurrences()}


def test_a_rolling_deploy_runs_every_kind_on_a_worker_that_knows_it(
    store, second_store, clock, make_runtime: RuntimeFactory
):
    """Two workers with different handler sets share one database: old code knows ``a``, new
    code knows ``b``, both know ``shared``. Nothing is dead-lettered for a missing handler, and
    a kind nobody knows waits."""
    for job_id, kind in [("job-a", "a"), ("job-b", "b"), ("job-s", "shared")]:
        enqueue(store, clock, job_id, kind, 30)
    enqueue(store, clock, "job-u", "unknown", 3)
    ran: list[tuple[str, str]] = []
    lock = threading.Lock()

    def handler(ctx: jobledger.JobContext) -> str:
        with lock:
            ran.append((ctx.owner_id, ctx.job.kind))
        return ctx.owner_id

    old = make_runtime({"a": handler, "shared": handler}, owner_id="old-code")
    new = make_runtime({"b": handler, "shared": handler}, owner_id="new-code", store=second_store)
    workers = [
        Running(jobledger.Worker(runtime, concurrency=2, poll_interval=FAST_POLL, planner=False))
        for runtime in (old, new)
    ]
    try:
        wait_until(lambda: len(ran) == 90, "90 runs")
    finally:
        summaries = [running.stop() for running in workers]

    assert Counter(kind for _, kind in ran) == {"a": 30, "b": 30, "shared": 30}
    assert {kind for owner, kind in ran if owner == "old-code"} <= {"a", "shared"}
    assert {kind for owner, kind in ran if owner == "new-code"} <= {"b", "shared"}
    assert statuses(store) == {
        ("a", "succeeded"): 30,
        ("b", "succeeded"): 30,
        ("shared", "succeeded"): 30,
        ("unknown", "queued"): 3,
    }
    claims = store.events(event_type="occurrence_claimed", limit=1000)
    assert len(claims) == 90  # each claimed once: nothing released, retried or reclaimed
    assert store.events(job_id="job-u", event_type="occurrence_claimed") == []
    assert sum(s.statuses["succeeded"] for s in summaries) == 90
    assert all(s.statuses.keys() == {"succeeded"} for s in summaries)
    assert store.list_dead_letters() == []


def test_an_unknown_kind_is_picked_up_once_a_worker_that_knows_it_arrives(
    store, clock, make_runtime: RuntimeFactory
):
    enqueue(store, clock, "job-n", "new_kind", 5)
    old = Running(
        jobledger.Worker(
            make_runtime({"old_kind": print}, owner_id="old-code"),
            poll_interval=FAST_POLL,
            planner=False,
        )
    )
    try:
        time.sleep(0.2)  # several polls
        assert statuses(store) == {("new_kind", "queued"): 5}
        new = Running(
            jobledger.Worker(
                make_runtime({"new_kind": lambda ctx: "ok"}, owner_id="new-code"),
                poll_interval=FAST_POLL,
                planner=False,
            )
        )
        wait_until(lambda: statuses(store) == {("new_kind", "succeeded"): 5}, "the new kind ran")
        assert new.stop().statuses == {"succeeded": 5}
    finally:
        summary = old.stop()
    assert summary.statuses == {}


def _held_by(store: jobledger.Store, owner: str) -> int:
    return sum(h.leases for h in store.lease_holders() if h.owner_id == owner)


def test_a_busy_worker_holds_concurrency_plus_prefetch_leases(
    store, clock, make_runtime: RuntimeFactory
):
    enqueue(store, clock, "job-p", "echo", 40)
    gate = threading.Event()

    def handler(ctx: jobledger.JobContext) -> None:
        gate.wait(WAIT_S)

    runtime = make_runtime({"echo": handler}, owner_id="bounded", heartbeat=ManualHeartbeat())
    worker = jobledger.Worker(
        runtime, concurrency=2, prefetch=3, poll_interval=FAST_POLL, planner=False
    )
    samples: list[int] = []
    running = Running(worker)
    try:
        wait_until(lambda: _held_by(store, "bounded") == 5, "two running and three claimed ahead")
        for _ in range(20):  # it stays there while the slots are busy
            samples.append(_held_by(store, "bounded"))
            time.sleep(0.005)
        assert set(samples) == {5}
        assert len(runtime.in_flight()) == 2
    finally:
        gate.set()
        running.stop()
    assert store.lease_holders() == []


def test_a_worker_never_holds_more_than_concurrency_plus_prefetch_leases(
    store, clock, make_runtime: RuntimeFactory
):
    enqueue(store, clock, "job-p", "echo", 40)
    settling, release = threading.Event(), threading.Event()

    def settle_batch(settlements: list[jobledger.Settlement], **starts: Any) -> Any:
        settling.set()
        release.wait(WAIT_S)  # a slow commit: the settles lag behind the handlers
        return store.settle_batch(settlements, **starts)

    runtime = make_runtime({"echo": lambda ctx: None}, owner_id="bounded")
    runtime.store = _Spy(store, settle_batch=settle_batch)
    worker = jobledger.Worker(
        runtime, concurrency=2, prefetch=3, poll_interval=FAST_POLL, planner=False
    )
    running = Running(worker)
    try:
        assert settling.wait(WAIT_S)
        try:  # give the slots time to move on (they must not claim beyond the bound)
            wait_until(lambda: _held_by(store, "bounded") > 5, "more than 5", timeout_s=2)
        except AssertionError:
            pass
        assert _held_by(store, "bounded") <= 2 + 3
    finally:
        release.set()
        summary = running.stop()
    assert summary.statuses["succeeded"] >= 1


class _Spy:
    def __init__(self, store: jobledger.Store, **overrides: Any) -> None:
        self._store = store
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_prefetch_zero_claims_only_for_idle_slots(store, clock, make_runtime: RuntimeFactory):
    enqueue(store, clock, "job-z", "echo", 5)
    gate = threading.Event()
    runtime = make_runtime(
        {"echo": lambda ctx: gate.wait(WAIT_S)}, owner_id="exact", heartbeat=ManualHeartbeat()
    )
    worker = jobledger.Worker(
        runtime, concurrency=2, prefetch=0, poll_interval=FAST_POLL, planner=False
    )
    running = Running(worker)
    try:
        wait_until(lambda: len(runtime.in_flight()) == 2, "two running")
        assert [(h.owner_id, h.leases) for h in store.lease_holders()] == [("exact", 2)]
    finally:
        gate.set()
        running.stop()


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_drain_takes_fewer_transactions_than_occurrences(
    store, clock, make_runtime: RuntimeFactory, concurrency: int
):
    """Claims made ahead in batches and group-committed settles (issue 10). A claim held ahead
    is marked started before its handler runs (issue 30): the mark rides in the settle that
    freed its slot, so a slot's next handler waits for that commit — one slot commits once per
    occurrence (the settle of one, the mark of the next); slots share commits."""
    enqueue(store, clock, "job-d", "echo", 300)
    runtime = make_runtime({"echo": lambda ctx: None}, heartbeat=ManualHeartbeat())
    worker = jobledger.Worker(
        runtime, concurrency=concurrency, poll_interval=FAST_POLL, planner=False
    )
    running = Running(worker)
    try:
        wait_until(lambda: worker.summary.statuses["succeeded"] == 300, "the drain")
    finally:
        summary = running.stop()
    assert summary.statuses == {"succeeded": 300}
    assert 0 < summary.claim_transactions < 300 // 4
    assert 0 < summary.settle_transactions <= 300  # no transaction of their own for marks
    if concurrency > 1:
        assert summary.settle_transactions < 300
    # Every handler began after its start mark: in its claim, or in a settle's transaction.
    started = store.events(event_type="occurrence_started", limit=1000)
    assert all(o.started_at is not None for o in store.list_occurrences(limit=300).items)
    assert len(started) <= 300


def test_an_app_worker_on_either_store_runs_and_stops(store, clock):
    with jobledger.App(store, authorize=jobledger.allow_all) as app:
        done = threading.Event()

        @app.handler("k")
        def handler(ctx: jobledger.JobContext) -> Any:
            done.set()
            return ctx.payload

        app.create_job("j", "k")
        occurrence = app.enqueue("j", payload={"n": 1})
        running = Running(app.worker(planner=False, poll_interval=FAST_POLL))
        try:
            assert done.wait(WAIT_S)
            wait_until(
                lambda: app.get_occurrence(occurrence.id).status == "succeeded", "the settle"
            )
        finally:
            summary = running.stop()
        assert summary.statuses == {"succeeded": 1}
        assert app.get_occurrence(occurrence.id).result == {"n": 1}
