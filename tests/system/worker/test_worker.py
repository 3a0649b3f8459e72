"""The worker loop: single steps, same-process wake-ups, concurrency and graceful shutdown."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.testing import FakeClock, run_until_idle

from .conftest import add_job, event_types, stop_worker

WAIT_S = 5
FAST_POLL = timedelta(milliseconds=20)  # so a stopping feeder never waits long for its poll


def start(worker: jobledger.Worker) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(
        target=lambda: box.append(worker.run(install_signal_handlers=False)), daemon=True
    )
    thread.start()
    assert worker.wait_until_running(WAIT_S)
    return thread, box


def test_run_once_steps_without_threads(store, clock, make_runtime):
    for n in range(3):
        add_job(store, f"job-{n}", clock=clock)
    worker = jobledger.Worker(make_runtime({"echo": lambda ctx: ctx.occurrence.job_id}))
    first = worker.run_once()
    assert [r.status for r in first] == ["succeeded"]
    rest = worker.step(limit=10)
    assert [r.status for r in rest] == ["succeeded", "succeeded"]
    assert worker.run_once() == []
    assert worker.summary.statuses["succeeded"] == 3


def test_run_until_idle_helper_accepts_a_worker_or_runtime(store, clock, make_runtime):
    add_job(store, "job-1", clock=clock)
    add_job(store, "job-2", clock=clock)
    runtime = make_runtime({"echo": lambda ctx: "ok"})
    assert len(run_until_idle(jobledger.Worker(runtime), limit=1)) == 1
    assert [r.result for r in run_until_idle(runtime)] == ["ok"]
    with pytest.raises(jobledger.InvalidArgument):
        run_until_idle(object())


def test_an_enqueue_in_the_same_process_wakes_an_idle_worker(store, clock, make_runtime):
    store.create_job(id="job-1", kind="echo", authority={"principal": {"type": "t", "id": "t"}})
    done = threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        done.set()
        return "woken"

    worker = jobledger.Worker(
        make_runtime({"echo": handler}), poll_interval=timedelta(hours=1), planner=False
    )
    thread, box = start(worker)
    store.enqueue_occurrence(job_id="job-1", scheduled_for=clock(), trigger_key="now")
    assert done.wait(WAIT_S), "the worker did not wake on the work signal"
    stop_worker(worker, thread)
    assert box[0].statuses["succeeded"] == 1


def test_concurrent_sync_and_async_handlers(store, clock, make_runtime):
    barrier = threading.Barrier(2, timeout=WAIT_S)
    for n in range(2):
        add_job(store, f"sync-{n}", kind="sync", clock=clock)
    for n in range(3):
        add_job(store, f"async-{n}", kind="async", clock=clock)
    seen: list[str] = []
    all_done = threading.Event()

    def sync_handler(ctx: jobledger.JobContext) -> str:
        barrier.wait()  # both sync handlers must run at the same time
        return "sync"

    async def async_handler(ctx: jobledger.JobContext) -> str:
        await asyncio.sleep(0.01)
        seen.append(ctx.occurrence.job_id)
        if len(seen) == 3:
            all_done.set()
        return "async"

    runtime = make_runtime({"sync": sync_handler, "async": async_handler})
    worker = jobledger.Worker(runtime, concurrency=3, poll_interval=FAST_POLL, planner=False)
    thread, box = start(worker)
    assert all_done.wait(WAIT_S)
    for _ in range(500):
        if sum(worker.summary.statuses.values()) == 5:
            break
        threading.Event().wait(0.01)
    worker.stop()
    thread.join(WAIT_S)
    assert box[0].statuses == {"succeeded": 5}


def test_stop_lets_in_flight_work_finish_within_the_grace_period(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    started, release = threading.Event(), threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        release.wait(WAIT_S)
        return "finished"

    worker = jobledger.Worker(
        make_runtime({"echo": handler}),
        grace_period=timedelta(seconds=WAIT_S),
        poll_interval=FAST_POLL,
        planner=False,
    )
    thread, box = start(worker)
    assert started.wait(WAIT_S)
    worker.stop()
    release.set()
    thread.join(WAIT_S)
    summary = box[0]
    assert (summary.statuses["succeeded"], summary.released, summary.forced) == (1, [], False)
    assert store.get_occurrence(occurrence.id).status == "succeeded"


def test_after_the_grace_period_unfinished_leases_are_released(
    store, clock: FakeClock, make_runtime
):
    occurrence = add_job(store, clock=clock)
    started = threading.Event()
    cancelled: list[bool] = []

    def stubborn(ctx: jobledger.JobContext) -> str:
        started.set()
        cancelled.append(ctx.cancel_event.wait(WAIT_S))
        return "too late"

    runtime = make_runtime({"echo": stubborn}, owner_id="leaving")
    worker = jobledger.Worker(
        runtime, grace_period=timedelta(0), poll_interval=FAST_POLL, planner=False
    )
    thread, box = start(worker)
    assert started.wait(WAIT_S)
    worker.stop()
    thread.join(WAIT_S)
    summary = box[0]
    assert summary.forced is True
    assert [o.id for o in summary.released] == [occurrence.id]
    assert cancelled == [True]
    released = store.get_occurrence(occurrence.id)
    assert (released.status, released.attempt, released.available_at) == ("retry_wait", 0, clock())
    successor = make_runtime({"echo": lambda ctx: "done by successor"}, owner_id="successor")
    assert successor.run_next().status == "succeeded"
    types = event_types(store, occurrence.id)
    assert types.count("occurrence_succeeded") == 1
    assert types.count("occurrence_released") == 1


def test_a_second_stop_skips_the_grace_period(store, clock, make_runtime):
    add_job(store, clock=clock)
    started = threading.Event()

    def handler(ctx: jobledger.JobContext) -> None:
        started.set()
        ctx.cancel_event.wait(WAIT_S)

    worker = jobledger.Worker(
        make_runtime({"echo": handler}),
        grace_period=timedelta(hours=1),
        poll_interval=FAST_POLL,
        planner=False,
    )
    thread, box = start(worker)
    assert started.wait(WAIT_S)
    worker.stop()
    worker.stop()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert box[0].forced is True
    assert len(box[0].released) == 1


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 0},
        {"concurrency": 1.5},
        {"concurrency": 1001},
        {"prefetch": -1},
        {"poll_interval": timedelta(0)},
        {"poll_interval": 5},  # was 5 ms; a bare number is refused now
        {"poll_jitter": 1},
        {"grace_period": timedelta(seconds=-1)},
        {"grace_period": 30},
        {"kinds": set()},
        {"kinds": "echo"},
        {"not_an_option": 1},
    ],
)
def test_worker_options_are_validated(make_runtime, options):
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Worker(make_runtime({"echo": print}), **options)


def test_a_worker_needs_a_runtime_and_kinds_to_claim(make_runtime):
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Worker(object())
    with pytest.raises(jobledger.InvalidArgument) as raised:
        jobledger.Worker(make_runtime({}))  # no handlers, no kinds: it could claim nothing
    assert raised.value.details == {"field": "kinds"}
    assert jobledger.Worker(make_runtime({}), kinds={"echo"}).kinds == {"echo"}
    assert jobledger.Worker(make_runtime({"a": print, "b": print})).kinds == {"a", "b"}


def test_the_default_thread_heartbeat_renews_in_the_background(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    renewed = threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        for _ in range(200):
            if event_types(store, ctx.occurrence_id).count("occurrence_renewed") >= 2:
                renewed.set()
                break
            threading.Event().wait(0.01)
        return "ok"

    runtime = make_runtime(
        {"echo": handler},
        heartbeat=jobledger.ThreadHeartbeat(),
        lease_ms=1000,
        renew_interval_ms=5,
    )
    assert runtime.run_next().status == "succeeded"
    assert renewed.is_set()
    assert event_types(store, occurrence.id).count("occurrence_renewed") >= 2
    assert isinstance(ManualHeartbeat(), jobledger.engine.heartbeat.HeartbeatDriver)


# -- shutdown races (each reproduced deterministically) -------------------------------------


class SignalProxy:
    """Delegates to the store's work signal; the first ``wait`` runs ``on_first_wait`` first
    (after the feeder has decided to wait: the stop check is behind it)."""

    def __init__(self, real: Any, on_first_wait: Any) -> None:
        self._real = real
        self._on_first_wait = on_first_wait

    @property
    def generation(self) -> int:
        return self._real.generation

    def wait(self, seen: int, timeout_s: float) -> int:
        hook, self._on_first_wait = self._on_first_wait, None
        if hook is not None:
            hook()
        return self._real.wait(seen, timeout_s)

    def notify(self) -> None:
        self._real.notify()


class StoreProxy:
    """A real store with some attributes overridden."""

    def __init__(self, store: jobledger.Store, **overrides: Any) -> None:
        self._store = store
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_an_idle_worker_stops_at_once_whatever_its_poll_interval(store, clock, make_runtime):
    runtime = make_runtime({"echo": lambda ctx: None})
    worker = jobledger.Worker(runtime, poll_interval=timedelta(hours=1), planner=False)
    thread, box = start(worker)
    try:
        time.sleep(0.2)  # the feeder found nothing and waits for work
        began = time.monotonic()
        worker.stop()
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the idle worker slept through the shutdown"
        assert time.monotonic() - began < 2
        assert box[0].forced is False
    finally:
        store.work_signal.notify()
        thread.join(15)


def test_a_stop_between_the_stop_check_and_the_poll_wakes_the_idle_feeder(
    store, clock, make_runtime
):
    """A feeder that checked ``stop`` just before the shutdown began must not sleep a full poll."""
    runtime = make_runtime({"echo": lambda ctx: None})
    worker = jobledger.Worker(
        runtime, poll_interval=timedelta(hours=1), grace_period=timedelta(hours=1), planner=False
    )
    real = store.work_signal

    def stop_while_about_to_wait() -> None:
        worker.stop()
        time.sleep(1.0)  # run() notices within 0.5 s and starts shutting the feeder down

    runtime.store = StoreProxy(store, work_signal=SignalProxy(real, stop_while_about_to_wait))
    thread, box = start(worker)
    try:
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the idle feeder slept through the shutdown"
        assert box[0].forced is False
    finally:
        real.notify()
        thread.join(15)


def test_a_claim_in_flight_when_the_stop_arrives_is_given_back(store, clock, make_runtime):
    """The feeder's claim transaction commits after the stop: its claims go back at once."""
    occurrence = add_job(store, clock=clock)
    claiming, gate = threading.Event(), threading.Event()
    ran: list[str] = []

    def claim_batch(**kwargs: Any) -> Any:
        claiming.set()
        gate.wait(WAIT_S)  # hold the claim until the worker was told to stop
        return store.claim_batch(**kwargs)

    runtime = make_runtime({"echo": ran.append}, owner_id="leaving")
    runtime.store = StoreProxy(store, claim_batch=claim_batch)
    worker = jobledger.Worker(runtime, poll_interval=FAST_POLL, planner=False)
    thread, box = start(worker)
    assert claiming.wait(WAIT_S)
    worker.stop()
    gate.set()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert ran == []
    assert [o.id for o in box[0].released] == [occurrence.id]
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.attempt, after.lease_owner) == ("retry_wait", 0, None)


def test_an_attempt_registered_after_the_first_abandon_is_still_released(
    store, clock, make_runtime
):
    """A slot that took a claim just before the stop and registered it after the first
    abandon_all pass is released by the next pass."""
    occurrence = add_job(store, clock=clock)
    taken, gate = threading.Event(), threading.Event()

    def stubborn(ctx: jobledger.JobContext) -> str:
        ctx.cancel_event.wait(WAIT_S)
        return "too late"

    runtime = make_runtime({"echo": stubborn}, owner_id="leaving")
    original_enter, original_abandon = runtime.enter, runtime.abandon_all

    def enter(*args: Any, **kwargs: Any) -> Any:
        taken.set()
        gate.wait(WAIT_S)  # register only after the worker has abandoned once
        return original_enter(*args, **kwargs)

    def abandon_all(reason: str) -> list[jobledger.Occurrence]:
        released = original_abandon(reason)
        gate.set()
        return released

    runtime.enter = enter
    runtime.abandon_all = abandon_all
    worker = jobledger.Worker(
        runtime, grace_period=timedelta(0), poll_interval=FAST_POLL, planner=False
    )
    thread, box = start(worker)
    assert taken.wait(WAIT_S)
    worker.stop()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert [o.id for o in box[0].released] == [occurrence.id]
    after = store.get_occurrence(occurrence.id)
    assert (after.status, after.attempt, after.lease_owner) == ("retry_wait", 0, None)


def test_a_slot_that_outlives_run_never_claims_again(store, clock, make_runtime, monkeypatch):
    monkeypatch.setattr(jobledger.engine.worker, "ABANDON_WAIT_S", 0.05)
    add_job(store, "job-1", clock=clock)
    started, gate = threading.Event(), threading.Event()
    slots: list[threading.Thread] = []
    later: list[str] = []

    def ignores_cancellation(ctx: jobledger.JobContext) -> None:
        slots.append(threading.current_thread())
        started.set()
        gate.wait(WAIT_S)

    runtime = make_runtime({"echo": ignores_cancellation, "later": later.append})
    worker = jobledger.Worker(
        runtime, grace_period=timedelta(0), poll_interval=FAST_POLL, planner=False
    )
    thread, box = start(worker)
    assert started.wait(WAIT_S)
    worker.stop()
    thread.join(WAIT_S)
    assert not thread.is_alive()
    assert len(box[0].released) == 1
    second = add_job(store, "job-2", kind="later", clock=clock)
    gate.set()  # the abandoned handler finally returns on its slot thread
    slots[0].join(WAIT_S)
    assert not slots[0].is_alive(), "the slot kept polling after run() returned"
    assert later == []
    assert store.get_occurrence(second.id).status == "queued"


def test_idle_polls_are_jittered_within_bounds(make_runtime):
    import random

    worker = jobledger.Worker(
        make_runtime({"echo": print}),
        poll_interval=timedelta(seconds=1),
        poll_jitter=0.25,
        rng=random.Random(7),
    )
    waits = [worker._poll_timeout() for _ in range(500)]
    assert all(0.75 <= w <= 1.25 for w in waits)
    assert max(waits) - min(waits) > 0.3  # actually spread, not a constant
    steady = jobledger.Worker(
        make_runtime({"echo": print}), poll_interval=timedelta(seconds=1), poll_jitter=0
    )
    assert {steady._poll_timeout() for _ in range(10)} == {1.0}


def test_async_handlers_share_one_event_loop_thread(store, clock, make_runtime):
    for n in range(3):
        add_job(store, f"async-{n}", kind="async", clock=clock)
    threads: set[str] = set()

    async def handler(ctx: jobledger.JobContext) -> None:
        threads.add(threading.current_thread().name)

    runtime = make_runtime({"async": handler})
    assert [r.status for r in jobledger.Worker(runtime).run_once(5)] == ["succeeded"] * 3
    assert threads == {"jobledger-asyncio"}


def test_an_interrupted_run_gives_leases_back_at_once(store, clock, make_runtime):
    import signal

    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        pytest.skip("needs the default SIGINT handler in the main thread")
    occurrence = add_job(store, clock=clock)
    started = threading.Event()

    def handler(ctx: jobledger.JobContext) -> None:
        started.set()
        ctx.cancel_event.wait(WAIT_S)

    worker = jobledger.Worker(
        make_runtime({"echo": handler}),
        grace_period=timedelta(hours=1),
        poll_interval=FAST_POLL,
        planner=False,
    )

    def interrupt() -> None:
        if started.wait(WAIT_S):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        worker.run(install_signal_handlers=False)  # Ctrl-C lands in run()'s wait
    assert worker.summary.forced is True
    assert [o.id for o in worker.summary.released] == [occurrence.id]
    assert store.get_occurrence(occurrence.id).status == "retry_wait"
