"""Cancelling a running occurrence, and per-kind handler time limits (issue 8).

Both are driven without sleeping: the heartbeat by ``ManualHeartbeat.tick()``, the time limits
by a :class:`~jobledger.engine.watchdog.Watchdog` on a fake monotonic clock, checked by hand.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.engine.watchdog import Watchdog

from .conftest import add_job, event_types, stop_worker

WAIT_S = 5


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    return thread, box


# -- cancelling a running occurrence ----------------------------------------------------------


@pytest.fixture
def store(any_store: jobledger.Store) -> jobledger.Store:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_store


def test_a_running_occurrence_cancelled_is_stopped_at_the_next_heartbeat(
    store, clock, make_runtime, driver: ManualHeartbeat
):
    occurrence = add_job(store, clock=clock)
    started, seen = threading.Event(), []

    def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        seen.append(ctx.cancel_event.wait(WAIT_S))
        return "finished anyway"

    runtime = make_runtime({"echo": handler})
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    cancelled = store.cancel_occurrence(occurrence_id=occurrence.id, actor="ops", reason="stop it")
    assert cancelled.status == "cancelled"
    assert seen == []  # nothing tells the handler until the next heartbeat
    driver.tick()
    thread.join(WAIT_S)
    assert seen == [True]
    [result] = box
    assert (result.status, result.lease_lost) == ("aborted", True)
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.result, after.lease_owner) == ("cancelled", None, None)
    assert event_types(store, occurrence.id) == [
        "occurrence_enqueued",
        "occurrence_claimed",
        "occurrence_cancelled",
    ]
    assert runtime.keeper.tracked == 0
    assert driver.active == 0  # nothing left to renew: the heartbeat stopped


def test_an_async_handler_of_a_cancelled_occurrence_has_its_task_cancelled(
    store, clock, make_runtime, driver: ManualHeartbeat
):
    occurrence = add_job(store, clock=clock)
    started, seen, noticed = threading.Event(), [], threading.Event()

    async def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            seen.append("task cancelled")
            noticed.set()
            raise
        return "unreachable"

    runtime = make_runtime({"echo": handler})
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    store.cancel_occurrence(occurrence_id=occurrence.id, actor="ops", reason="stop it")
    driver.tick()
    thread.join(WAIT_S)
    assert (box[0].status, box[0].lease_lost) == ("aborted", True)
    # The run returns once the task is cancelled; the task's own except block runs on the loop.
    assert noticed.wait(WAIT_S)
    assert seen == ["task cancelled"]
    assert store.get_occurrence(occurrence.id).status == "cancelled"


def test_the_settle_of_a_cancelled_attempt_is_refused(store, clock, make_runtime):
    """Without a heartbeat in between, the handler finishes; its settle is fenced out."""
    occurrence = add_job(store, clock=clock)

    def handler(ctx: jobledger.JobContext) -> str:
        store.cancel_occurrence(occurrence_id=ctx.occurrence_id, actor="ops", reason="too late")
        return "done"

    result = make_runtime({"echo": handler}).run_next()
    assert (result.status, result.lease_lost) == ("aborted", True)
    assert result.error["code"] == "SCHEDULER_LEASE_LOST"
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.result) == ("cancelled", None)
    assert "occurrence_succeeded" not in event_types(store, occurrence.id)


def test_a_worker_running_a_cancelled_occurrence_moves_on(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    add_job(store, "job-2", clock=clock)
    driver = ManualHeartbeat()
    started = threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        if ctx.job.id == "job-1":
            started.set()
            ctx.cancel_event.wait(WAIT_S)
        return ctx.job.id

    runtime = make_runtime({"echo": handler}, heartbeat=driver)
    worker = jobledger.Worker(
        runtime, concurrency=2, poll_interval=timedelta(milliseconds=20), planner=False
    )
    box: list[Any] = []
    thread = threading.Thread(
        target=lambda: box.append(worker.run(install_signal_handlers=False)), daemon=True
    )
    thread.start()
    try:
        assert started.wait(WAIT_S)
        store.cancel_occurrence(occurrence_id=occurrence.id, actor="ops", reason="stop")
        driver.tick()
        for _ in range(500):
            if worker.summary.statuses["succeeded"] == 1 and runtime.in_flight() == []:
                break
            threading.Event().wait(0.01)
    finally:
        stop_worker(worker, thread)
    assert box[0].statuses == {"succeeded": 1, "aborted": 1}
    assert box[0].released == []
    assert store.get_occurrence(occurrence.id).status == "cancelled"


# -- time limits ------------------------------------------------------------------------------


def test_a_sync_handler_past_its_time_limit_fails_retryable_and_its_lease_is_dropped(
    store, clock, make_runtime, driver: ManualHeartbeat
):
    occurrence = add_job(store, clock=clock)
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    started, release, seen = threading.Event(), threading.Event(), []

    def hung(ctx: jobledger.JobContext) -> str:
        started.set()
        release.wait(WAIT_S)  # a sync handler cannot be stopped from outside: it runs on
        seen.append(ctx.cancel_reason)
        return "too late"

    runtime = make_runtime({}, watchdog=watchdog)
    runtime.register_handler("echo", hung, timeout=timedelta(seconds=30))
    assert runtime.timeout_for("echo") == 30_000
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    monotonic.now += 29.999
    assert watchdog.check() == 0
    monotonic.now += 0.001
    assert watchdog.check() == 1
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.lease_owner) == ("retry_wait", None)
    assert after.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
    assert after.last_error["details"] == {"timeoutMs": 30_000, "jobKind": "echo"}
    # Its lease is no longer renewed: nothing is tracked and the heartbeat stopped.
    assert runtime.keeper.tracked == 0
    assert driver.active == 0
    driver.tick()
    release.set()
    thread.join(WAIT_S)
    [result] = box
    assert (result.status, result.timed_out) == ("retry_wait", True)
    assert result.error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
    assert seen == ["timeout"]  # its context was cancelled
    final = store.get_occurrence(occurrence.id)
    assert (final.status, final.result) == ("retry_wait", None)  # the late result is discarded
    types = event_types(store, occurrence.id)
    assert "occurrence_renewed" not in types
    assert types[-1] == "occurrence_retry_scheduled"


def test_an_async_handler_past_its_time_limit_has_its_task_cancelled(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    started, seen, noticed = threading.Event(), [], threading.Event()

    async def hung(ctx: jobledger.JobContext) -> str:
        started.set()
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            seen.append("task cancelled")
            noticed.set()
            raise
        return "unreachable"

    runtime = make_runtime({}, watchdog=watchdog)
    runtime.register_handler("echo", hung, timeout=timedelta(milliseconds=1500))
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    monotonic.now += 1.5
    assert watchdog.check() == 1
    thread.join(WAIT_S)
    [result] = box
    assert (result.status, result.timed_out) == ("retry_wait", True)
    assert result.occurrence.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
    # The run returns once the task is cancelled; the task's own except block runs on the loop.
    assert noticed.wait(WAIT_S)
    assert seen == ["task cancelled"]
    assert store.get_occurrence(occurrence.id).status == "retry_wait"


def test_a_time_limit_uses_the_kinds_backoff_and_counts_as_an_attempt(store, clock, make_runtime):
    add_job(store, max_attempts=1, clock=clock)
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    started, release = threading.Event(), threading.Event()

    def hung(ctx: jobledger.JobContext) -> None:
        started.set()
        release.wait(WAIT_S)

    runtime = make_runtime({}, watchdog=watchdog)
    runtime.register_handler("echo", hung, timeout=timedelta(seconds=1))
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    monotonic.now += 1
    watchdog.check()
    release.set()
    thread.join(WAIT_S)
    assert box[0].status == "dead_letter"  # no attempts left
    assert box[0].error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"


def test_a_handler_that_finishes_in_time_disarms_its_alarm(store, clock, make_runtime):
    add_job(store, clock=clock)
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    runtime = make_runtime({}, watchdog=watchdog)
    runtime.register_handler("echo", lambda ctx: "quick", timeout=timedelta(seconds=1))
    assert runtime.run_next().status == "succeeded"
    monotonic.now += 60
    assert watchdog.check() == 0


def test_app_handler_time_limits_reach_the_runtime(store, clock):
    monotonic = FakeMonotonic()
    watchdog = Watchdog(monotonic=monotonic, thread=False)
    started, release = threading.Event(), threading.Event()
    with jobledger.App(store, authorize=jobledger.allow_all) as app:

        @app.handler("slow", timeout=timedelta(minutes=2))
        def slow(ctx: jobledger.JobContext) -> None:
            started.set()
            release.wait(WAIT_S)

        app.create_job("j", "slow")
        occurrence = app.enqueue("j")
        runtime = app.runtime(heartbeat=ManualHeartbeat(), watchdog=watchdog)
        assert runtime.timeout_for("slow") == 120_000
        thread, box = run_in_thread(runtime.run_next)
        assert started.wait(WAIT_S)
        monotonic.now += 120
        assert watchdog.check() == 1
        release.set()
        thread.join(WAIT_S)
        assert box[0].error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
        assert app.get_occurrence(occurrence.id).status == "retry_wait"


@pytest.mark.parametrize("timeout", [30, 1.5, timedelta(0), timedelta(microseconds=500)])
def test_a_time_limit_must_be_a_positive_whole_millisecond_timedelta(make_runtime, timeout):
    with pytest.raises(jobledger.InvalidArgument):
        make_runtime({}).register_handler("echo", print, timeout=timeout)
    app = jobledger.App("never-opened.sqlite3", authorize=jobledger.allow_all)
    with pytest.raises(jobledger.InvalidArgument):
        app.handler("echo", timeout=timeout)
