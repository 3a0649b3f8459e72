"""Heartbeats, lost leases and abandoned attempts — driven by a FakeClock and ManualHeartbeat."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import FakeClock

from .conftest import LEASE_MS, add_job, event_types

WAIT_S = 5  # bounded waits for events set by other threads; never reached when tests pass


def test_heartbeats_keep_a_long_handler_leased(store, clock: FakeClock, make_runtime, driver):
    occurrence = add_job(store, clock=clock)
    expiries: list[int] = []

    def long_handler(ctx: jobledger.JobContext) -> str:
        for _ in range(5):  # 15 s of work with a 10 s lease
            clock.advance(3_000)
            assert driver.tick() == 1
            expiries.append(store.get_occurrence(ctx.occurrence_id).lease_expires_at)
            assert not ctx.is_cancelled()
        return "finished"

    runtime = make_runtime({"echo": long_handler})
    result = runtime.run_next()
    assert (result.status, result.result) == ("succeeded", "finished")
    start = occurrence.available_at
    assert expiries == [start + 3_000 * n + LEASE_MS for n in range(1, 6)]
    assert driver.intervals == [runtime.renew_interval_ms]
    assert (driver.started, driver.stopped, driver.active) == (1, 1, 0)
    types = event_types(store, occurrence.id)
    # Five heartbeats; no revalidating renew before the handler (a fresh claim, issue 10).
    assert types.count("occurrence_renewed") == 5
    assert types[-1] == "occurrence_succeeded"


def test_without_heartbeats_an_expired_lease_settles_nothing(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)

    def overrun(ctx: jobledger.JobContext) -> str:
        clock.advance(LEASE_MS)
        return "too late"

    result = make_runtime({"echo": overrun}).run_next()
    assert result.status == "aborted"
    assert result.lease_lost is True
    assert result.error["code"] == "SCHEDULER_LEASE_LOST"
    assert store.get_occurrence(occurrence.id).result is None
    assert "occurrence_succeeded" not in event_types(store, occurrence.id)


def test_a_lost_lease_cancels_the_handler_and_the_loser_settles_nothing(
    store, clock: FakeClock, make_runtime, driver
):
    occurrence = add_job(store, clock=clock)
    loser = make_runtime({}, owner_id="loser")
    seen: dict[str, Any] = {}

    def handler(ctx: jobledger.JobContext) -> str:
        clock.advance(LEASE_MS)  # stalled (GC pause, network partition...)
        winner = store.claim_next(owner_id="winner", lease_ms=LEASE_MS)
        seen["winner_fence"] = winner.fence
        driver.tick()  # the next heartbeat discovers the loss
        seen["cancelled"] = ctx.is_cancelled()
        seen["reason"] = ctx.cancel_reason
        return "result of a superseded attempt"

    loser.register_handler("echo", handler)
    result = loser.run_next()

    assert seen == {"winner_fence": 2, "cancelled": True, "reason": "lease_lost"}
    assert result.status == "aborted"
    assert result.lease_lost is True
    assert result.error["code"] == "SCHEDULER_LEASE_LOST"
    assert result.occurrence.lease_owner == "winner"
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.lease_owner, after.fence, after.result) == (
        "running",
        "winner",
        2,
        None,
    )
    loser_writes = [
        e.type for e in store.history(occurrence_id=occurrence.id) if e.owner_id == "loser"
    ]
    assert loser_writes == ["occurrence_claimed"]  # no step-5 renew on a fresh claim
    settled = store.settle(
        occurrence_id=occurrence.id, owner_id="winner", fence=2, outcome="succeeded", result=1
    )
    assert settled.status == "succeeded"


def test_renew_lease_from_the_handler(store, clock: FakeClock, make_runtime):
    add_job(store, clock=clock)
    outcomes: list[Any] = []

    def handler(ctx: jobledger.JobContext) -> str:
        clock.advance(LEASE_MS - 1)
        outcomes.append(ctx.renew_lease().lease_expires_at == clock() + LEASE_MS)
        clock.advance(LEASE_MS)
        try:
            ctx.renew_lease()
        except jobledger.LeaseLost:
            outcomes.append(ctx.is_cancelled())
            raise
        return "unreachable"

    result = make_runtime({"echo": handler}).run_next()
    assert outcomes == [True, True]
    assert result.status == "aborted"
    assert result.lease_lost is True


def run_in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    return thread, box


def test_a_lost_lease_cancels_an_async_handlers_task(store, clock: FakeClock, make_runtime, driver):
    occurrence = add_job(store, clock=clock)
    started = threading.Event()
    seen: list[str] = []

    async def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            seen.append("task cancelled")
            raise
        return "unreachable"

    runtime = make_runtime({"echo": handler}, owner_id="loser")
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    clock.advance(LEASE_MS)
    store.claim_next(owner_id="winner", lease_ms=LEASE_MS)
    driver.tick()
    thread.join(WAIT_S)
    [result] = box
    assert result.status == "aborted"
    assert result.lease_lost is True
    assert store.get_occurrence(occurrence.id).lease_owner == "winner"
    runtime.close()  # stops the loop; the cancelled task has finished by then
    assert seen == ["task cancelled"]


def test_context_cancelled_can_be_awaited():
    ctx = jobledger.JobContext(
        job=None,
        occurrence=None,
        decision=jobledger.Decision(True),
        owner_id="o",
        renew=lambda: None,
    )

    async def main() -> bool:
        waiter = asyncio.ensure_future(ctx.cancelled())
        await asyncio.sleep(0)
        assert not waiter.done()
        threading.Thread(target=ctx._cancel, args=("test",)).start()
        await asyncio.wait_for(waiter, WAIT_S)
        return ctx.is_cancelled()

    assert asyncio.run(main()) is True
    assert ctx.cancel_reason == "test"


def test_abandon_releases_the_lease_and_another_runtime_finishes(
    store, clock: FakeClock, make_runtime
):
    occurrence = add_job(store, clock=clock)
    started = threading.Event()
    noticed: list[bool] = []

    def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        noticed.append(ctx.cancel_event.wait(WAIT_S))
        return "finished after being abandoned"

    first = make_runtime({"echo": handler}, owner_id="first", heartbeat=ManualHeartbeat())
    thread, box = run_in_thread(first.run_next)
    assert started.wait(WAIT_S)
    assert [o.id for o in first.in_flight()] == [occurrence.id]
    released = first.abandon_all()
    thread.join(WAIT_S)
    assert noticed == [True]
    [result] = box
    assert (result.status, result.released, result.lease_lost) == ("aborted", True, False)
    assert [(o.status, o.attempt, o.fence) for o in released] == [("retry_wait", 0, 1)]
    assert first.in_flight() == []

    second = make_runtime({"echo": lambda ctx: ctx.fence}, owner_id="second")
    done = second.run_next()
    assert (done.status, done.result, done.occurrence.attempt) == ("succeeded", 2, 1)
    types = event_types(store, occurrence.id)
    assert types.count("occurrence_released") == 1
    assert types.count("occurrence_succeeded") == 1
    assert [
        e.data["reason"]
        for e in store.history(occurrence_id=occurrence.id)
        if e.type == "occurrence_released"
    ] == ["worker_shutdown"]


def test_a_release_before_the_handler_starts_never_runs_the_handler(
    store, clock: FakeClock, make_runtime
):
    """A worker giving the lease back between the claim and the handler's start wins.

    (This used to land inside the per-attempt heartbeat's start; the one heartbeat per runtime
    now starts when the attempt is registered, so the shutdown lands during authorization.)
    """
    occurrence = add_job(store, clock=clock)
    calls: list[str] = []
    holder: list[jobledger.Runtime] = []

    def authorize(request: jobledger.AuthorizationRequest) -> dict[str, bool]:
        holder[0].abandon_all()  # the shutdown lands exactly here
        return {"allowed": True}

    runtime = make_runtime(
        {"echo": lambda ctx: calls.append("ran")}, authorize=authorize, owner_id="first"
    )
    holder.append(runtime)
    result = runtime.run_next()
    assert (result.status, result.released, result.lease_lost) == ("aborted", True, False)
    assert calls == []
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.attempt) == ("retry_wait", 0)
    assert runtime.in_flight() == []
    assert runtime.keeper.tracked == 0


def test_a_failing_cancel_callback_does_not_stop_the_release(store, clock: FakeClock, make_runtime):
    occurrence = add_job(store, clock=clock)
    started = threading.Event()
    called: list[str] = []

    def handler(ctx: jobledger.JobContext) -> None:
        def explode() -> None:
            raise RuntimeError("callback bug")

        ctx.add_cancel_callback(explode)
        ctx.add_cancel_callback(lambda: called.append("second"))
        started.set()
        ctx.cancel_event.wait(WAIT_S)

    runtime = make_runtime({"echo": handler})
    thread, box = run_in_thread(runtime.run_next)
    assert started.wait(WAIT_S)
    released = runtime.abandon_all()  # must not raise the callback's error
    thread.join(WAIT_S)
    assert [o.id for o in released] == [occurrence.id]
    assert called == ["second"]
    assert box[0].released is True


@pytest.mark.filterwarnings("ignore:coroutine '_await' was never awaited:RuntimeWarning")
def test_waiting_on_a_stopped_event_loop_does_not_hang():
    """A coroutine scheduled as the loop shuts down never runs; the caller must not wait forever."""
    import concurrent.futures

    from jobledger.engine.loop import EventLoopThread

    loop_thread = EventLoopThread()
    stopped = asyncio.new_event_loop()  # a loop that is not running, as after close() stops it
    loop_thread._ensure = lambda: stopped  # the race: _ensure returned just before close()
    raised: list[BaseException] = []
    never_run = asyncio.sleep(0)

    def call() -> None:
        try:
            loop_thread.run(never_run)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(WAIT_S)
    try:
        assert not thread.is_alive(), "EventLoopThread.run waited forever on a stopped loop"
        assert [type(e) for e in raised] == [concurrent.futures.CancelledError]
    finally:
        stopped.close()
        never_run.close()
