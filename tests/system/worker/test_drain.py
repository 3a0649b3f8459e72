"""``Drain``: a worker run until idle — retries and delays within the horizon included — and
``read_backlog``: what is left. The store's clock is a FakeClock that only the drain's injected
``sleep`` moves."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

import jobledger
from jobledger.engine.drain import Drain, read_backlog

from .conftest import AUTHORITY

FAST_POLL = timedelta(milliseconds=20)


def _job(store: jobledger.Store, job_id: str = "job", kind: str = "echo") -> None:
    store.create_job(id=job_id, kind=kind, authority=AUTHORITY, max_attempts=5)


def _enqueue(store, clock, key: str, *, delay_ms: int = 0, job_id: str = "job"):
    return store.enqueue_occurrence(
        job_id=job_id,
        scheduled_for=clock() + delay_ms,
        available_at=clock() + delay_ms,
        trigger_key=key,
    )


def test_read_backlog_counts_what_waits_and_finds_the_next_due(store, clock):
    _job(store)
    _job(store, "other", kind="other")
    _enqueue(store, clock, "now")
    later = _enqueue(store, clock, "later", delay_ms=90_000)
    _enqueue(store, clock, "much-later", delay_ms=900_000)
    _enqueue(store, clock, "elsewhere", delay_ms=1_000, job_id="other")
    running = _enqueue(store, clock, "running")
    store.claim_occurrence(occurrence_id=running.id, owner_id="w9", lease_ms=60_000)
    backlog = read_backlog(store, {"echo"}, now=clock())
    # Due now or not, queued occurrences wait; the next one due is the first in the future.
    assert (backlog.waiting, backlog.running, backlog.complete) == (3, 1, True)
    assert backlog.next is not None and backlog.next.id == later.id
    assert backlog.next_due_at == clock() + 90_000
    assert read_backlog(store, {"nothing"}, now=clock()).next is None


def test_read_backlog_reads_at_most_its_limit(store, clock):
    _job(store)
    for n in range(5):
        _enqueue(store, clock, f"t{n}", delay_ms=(n + 1) * 1000)
    backlog = read_backlog(store, {"echo"}, now=clock(), limit=3)
    assert backlog.waiting == 5 and backlog.complete is False
    assert backlog.next is not None  # the earliest among the three read


def test_a_drain_waits_for_a_retry_on_the_injected_clock(store, clock, make_runtime):
    _job(store)
    first = _enqueue(store, clock, "flaky")

    def flaky(ctx: jobledger.JobContext) -> str:
        if ctx.occurrence.attempt == 1:
            raise jobledger.Retry("again", delay=timedelta(seconds=5))
        return "ok"

    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(round(seconds * 1000))

    worker = jobledger.Worker(make_runtime({"echo": flaky}), poll_interval=FAST_POLL, planner=False)
    report = Drain(worker, sleep=sleep).run(install_signal_handlers=False)
    assert report.outcome == "idle"
    assert (dict(report.statuses), report.attempts) == ({"succeeded": 1}, 2)
    assert sum(slept) == pytest.approx(5)
    assert store.get_occurrence(first.id).status == "succeeded"
    assert report.left is not None and report.left.waiting == 0


def test_a_drain_stopped_from_outside_still_says_what_is_left(store, clock, make_runtime):
    _job(store)
    later = _enqueue(store, clock, "later", delay_ms=30_000)
    worker = jobledger.Worker(
        make_runtime({"echo": lambda ctx: "ok"}), poll_interval=FAST_POLL, planner=False
    )
    waiting = threading.Event()

    def sleep(seconds: float) -> None:
        waiting.set()
        worker.stop()  # e.g. SIGTERM while waiting for the next one

    report = Drain(worker, sleep=sleep).run(install_signal_handlers=False)
    assert waiting.is_set()
    assert report.outcome == "stopped" and report.attempts == 0
    assert report.left is not None and report.left.next is not None
    assert report.left.next.id == later.id


def test_the_horizon_is_validated(make_runtime):
    worker = jobledger.Worker(make_runtime({"echo": print}), planner=False)
    for bad in (timedelta(seconds=-1), timedelta(days=2), 60):
        with pytest.raises(jobledger.InvalidArgument):
            Drain(worker, horizon=bad)  # type: ignore[arg-type]
