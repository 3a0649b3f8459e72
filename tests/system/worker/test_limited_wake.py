"""A freed slot of a limited queue starts the next occurrence at once, not at the next poll
(issue 32 item 2, SPEC §14): the settle that frees it wakes the workers of this process and of
every other one (PostgreSQL NOTIFY, SQLite's wake file), a worker's own freed slot wakes its
feeder, and a rate limit's next window wakes an idle worker when it opens.

Workers here poll once an hour: anything that ran did so because something woke them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

import jobledger
from jobledger import Queue, Rate
from jobledger.testing import FakeClock

from .conftest import AUTHORITY, RuntimeFactory
from .test_worker_store import Running, wait_until

NEVER = timedelta(hours=1)  # no poll within a test: only a wake-up runs anything
WAIT_S = 20.0


@pytest.fixture
def store(any_store: jobledger.Store) -> jobledger.Store:
    return any_store


@pytest.fixture
def other(any_target: str, clock: FakeClock) -> Iterator[jobledger.Store]:
    """Another handle on the same database, as another process has."""
    with jobledger.open_store(any_target, clock=clock) as opened:
        yield opened


def listening(store: jobledger.Store) -> int:
    """Start ``store``'s cross-process wake-up and wait until it hears; its generation then."""
    store.work_signal.watch()
    hearing = getattr(store, "listener", None)
    ready = hearing.connected if hearing is not None else store.wake_file.watching  # type: ignore[attr-defined]
    assert ready.wait(WAIT_S)
    return store.work_signal.generation


def declare(store: jobledger.Store, **limits: object) -> None:
    store.declare_queue(Queue(name="mail", **limits), actor="test")  # type: ignore[arg-type]


def enqueue(store: jobledger.Store, clock: FakeClock, job_id: str, kind: str, n: int) -> None:
    store.create_job(id=job_id, kind=kind, authority=AUTHORITY, queue="mail")
    store.enqueue_batch(
        [
            jobledger.EnqueueRequest(job_id=job_id, scheduled_for=clock(), trigger_key=f"t{i}")
            for i in range(n)
        ]
    )


def count(store: jobledger.Store, job_id: str, status: str) -> int:
    return len(store.list_occurrences(job_id=job_id, status=status).items)


def succeeded(store: jobledger.Store, job_id: str) -> int:
    return count(store, job_id, "succeeded")


def test_a_settle_that_frees_a_slot_wakes_this_process_and_the_others(store, other, clock):
    declare(store, concurrency=1)
    enqueue(store, clock, "job-m", "send", 2)
    seen_there = listening(other)
    claimed = store.claim_next(owner_id="w1", lease_ms=10_000)
    assert claimed is not None
    assert store.claim_next(owner_id="w2", lease_ms=10_000) is None  # the queue is full
    seen_here = store.work_signal.generation

    store.settle(occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, outcome="succeeded")

    assert store.work_signal.generation != seen_here  # this process: at once
    assert other.work_signal.wait(seen_there, WAIT_S) != seen_there  # the others: one notice


def test_a_settle_of_an_unlimited_queue_wakes_nobody_in_this_process(store, clock):
    """A settle wakes only for a slot someone may wait for: idle workers of a drained,
    unlimited queue are not woken to claim nothing after every settle."""
    enqueue(store, clock, "job-m", "send", 1)
    claimed = store.claim_next(owner_id="w1", lease_ms=10_000)
    assert claimed is not None
    seen = store.work_signal.generation
    store.settle(occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, outcome="succeeded")
    assert store.work_signal.generation == seen


def test_a_cancel_of_a_running_occurrence_frees_its_slot_for_other_processes(store, other, clock):
    declare(store, concurrency=1)
    enqueue(store, clock, "job-m", "send", 2)
    seen = listening(other)
    claimed = store.claim_next(owner_id="w1", lease_ms=10_000)
    assert claimed is not None
    store.cancel_occurrence(occurrence_id=claimed.id, actor="ops", reason="stuck")
    assert other.work_signal.wait(seen, WAIT_S) != seen


def test_a_worker_starts_the_next_occurrence_when_its_own_slot_frees(
    store, clock, make_runtime: RuntimeFactory
):
    declare(store, concurrency=1)
    enqueue(store, clock, "job-m", "send", 6)
    runtime = make_runtime({"send": lambda ctx: "sent"}, store=store)
    running = Running(jobledger.Worker(runtime, concurrency=2, poll_interval=NEVER, planner=False))
    try:
        wait_until(lambda: succeeded(store, "job-m") == 6, "6 sent", WAIT_S)
    finally:
        summary = running.stop()
    assert summary.statuses == {"succeeded": 6}


def test_a_slot_freed_by_another_process_starts_work_there_at_once(
    store, other, clock, make_runtime: RuntimeFactory
):
    """Worker A (kind ``a``) holds the queue's one slot; worker B (kind ``b``, another store
    handle: another process) finds the queue full and waits. A's settle wakes B."""
    declare(store, concurrency=1)
    enqueue(store, clock, "job-a", "a", 1)
    enqueue(store, clock, "job-b", "b", 1)
    release = threading.Event()
    started = threading.Event()

    def blocking(ctx: jobledger.JobContext) -> str:
        started.set()
        assert release.wait(WAIT_S)
        return "done"

    first = Running(
        jobledger.Worker(
            make_runtime({"a": blocking}, store=store, owner_id="worker-a"),
            poll_interval=NEVER,
            planner=False,
        )
    )
    second: Running | None = None
    try:
        assert started.wait(WAIT_S)
        second = Running(
            jobledger.Worker(
                make_runtime({"b": lambda ctx: "ok"}, store=other, owner_id="worker-b"),
                poll_interval=NEVER,
                planner=False,
            )
        )
        # B claimed and found the queue full; it now waits for a notice.
        feed = second.worker._feed
        wait_until(lambda: feed is not None and feed.claims >= 1, "B's first claim")
        listening(other)
        assert succeeded(store, "job-b") == 0
        release.set()
        wait_until(lambda: succeeded(store, "job-b") == 1, "B ran b", WAIT_S)
    finally:
        release.set()
        if second is not None:
            assert second.stop().statuses == {"succeeded": 1}
        assert first.stop().statuses == {"succeeded": 1}


def test_work_a_rate_limit_held_back_starts_when_the_next_window_opens(
    store, clock, make_runtime: RuntimeFactory
):
    assert clock() % 1000 == 0  # the start of a one-second window
    declare(store, rate=Rate(1, timedelta(seconds=1)))
    enqueue(store, clock, "job-m", "send", 2)
    runtime = make_runtime({"send": lambda ctx: "sent"}, store=store)
    running = Running(jobledger.Worker(runtime, poll_interval=NEVER, planner=False))
    try:
        wait_until(lambda: succeeded(store, "job-m") == 1, "the first sent", WAIT_S)
        assert count(store, "job-m", "queued") == 1
        clock.advance(1000)  # the next window
        wait_until(lambda: succeeded(store, "job-m") == 2, "the second sent", WAIT_S)
    finally:
        running.stop()
