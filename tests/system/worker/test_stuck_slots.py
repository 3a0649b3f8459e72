"""A sync handler past its time limit that ignores cancellation: its attempt is settled on time,
its slot is *stuck* until the thread returns, and the worker neither claims for that slot nor
keeps claims it cannot start. Time limits fire from a watchdog on a fake monotonic clock,
checked by hand; leases renew only on ``ManualHeartbeat.tick()``; the hung handler waits on an
event the test sets."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.engine.housekeeping import Housekeeper
from jobledger.engine.options import WorkerOptions
from jobledger.engine.watchdog import Watchdog
from jobledger.metrics import PrometheusObserver

from .conftest import add_job, event_types, stop_worker

WAIT_S = 5.0
FAST_POLL = timedelta(milliseconds=20)


@pytest.fixture
def store(any_store: jobledger.Store) -> jobledger.Store:
    """Every test here runs on SQLite and on PostgreSQL."""
    return any_store


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wait_until(condition: Callable[[], bool], what: str) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if condition():
            return
        pause.wait(0.005)
    raise AssertionError(f"never happened: {what}")


def feeder_settled(worker: jobledger.Worker) -> bool:
    """The feeder waits for room and no slot holds an attempt: it will claim nothing more until
    a slot frees up (the same check as the batching tests' ``feeder_waiting_for_room``)."""
    feed = worker._feed
    if feed is None:
        return False
    with feed._changed:
        return (
            bool(feed._changed._waiters)  # type: ignore[attr-defined]
            and feed._room() <= 0
            and feed._busy == 0
        )


def stuck_gauge(observer: PrometheusObserver) -> float | None:
    return observer.registry.get_sample_value("jobledger_worker_stuck_slots")


class HungWorker:
    """A worker whose ``hang`` handler (1 s limit) ignores cancellation until ``gate`` is set."""

    def __init__(self, store, make_runtime, driver: ManualHeartbeat, **options: Any) -> None:
        self.monotonic = FakeMonotonic()
        self.watchdog = Watchdog(monotonic=self.monotonic, thread=False)
        self.started, self.gate = threading.Event(), threading.Event()
        self.observer = PrometheusObserver()
        self.ran: list[str] = []
        self.runtime = make_runtime(
            {"echo": lambda ctx: self.ran.append(ctx.occurrence.id)},
            watchdog=self.watchdog,
            monotonic=self.monotonic,  # the worker's too: how long its slots have been stuck
            heartbeat=driver,
            observer=self.observer,
            owner_id="w-stuck",
            # The timed-out attempt's retry waits (the fake clock does not move), so each test
            # sees the stuck slot, not the occurrence's next attempt.
            retry_policy=jobledger.FixedBackoff(timedelta(hours=1)),
        )
        self.runtime.register_handler("hang", self._hang, timeout=timedelta(seconds=1))
        self.worker = jobledger.Worker(
            self.runtime, poll_interval=FAST_POLL, planner=False, **options
        )
        self.thread: threading.Thread | None = None

    def _hang(self, ctx: jobledger.JobContext) -> str:
        self.started.set()
        self.gate.wait(WAIT_S)  # ignores ctx.cancel_event, as a blocking call would
        return "too late"

    def start(self) -> None:
        self.thread = threading.Thread(
            target=lambda: self.worker.run(install_signal_handlers=False), daemon=True
        )
        self.thread.start()
        assert self.worker.wait_until_running(WAIT_S)
        assert self.started.wait(WAIT_S)

    def time_out(self) -> None:
        self.monotonic.now += 1
        assert self.watchdog.check() == 1

    def stop(self) -> None:
        self.gate.set()
        assert self.thread is not None
        stop_worker(self.worker, self.thread)
        assert not self.thread.is_alive()


def test_a_stuck_slot_claims_nothing_until_its_handler_returns(
    store, clock, make_runtime, driver, caplog
):
    caplog.set_level(logging.INFO, logger="jobledger.worker")
    hung = add_job(store, "job-hang", kind="hang", clock=clock)
    clock.advance(1)
    waiting = add_job(store, "job-next", kind="echo", clock=clock)
    run = HungWorker(store, make_runtime, driver, concurrency=1, prefetch=0)
    run.start()
    try:
        run.time_out()
        # Settled on time, retryable, its lease gone…
        wait_until(lambda: store.get_occurrence(hung.id).status == "retry_wait", "the timeout")
        after = store.get_occurrence(hung.id)
        assert after.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
        assert after.lease_owner is None
        # …but its thread runs on, so the one slot cannot start anything: nothing is claimed.
        wait_until(lambda: feeder_settled(run.worker), "the feeder to settle")
        assert store.get_occurrence(waiting.id).status == "queued"
        assert run.runtime.keeper.tracked == 0
        driver.tick()  # renews nothing
        assert event_types(store, waiting.id) == ["occurrence_enqueued"]
        assert [o.id for o in run.worker.stuck_slots] == [hung.id]
        assert stuck_gauge(run.observer) == 1
        stuck_logs = [r for r in caplog.records if "is stuck" in r.getMessage()]
        assert len(stuck_logs) == 1
        assert hung.id in stuck_logs[0].getMessage()
        assert stuck_logs[0].occurrence_id == hung.id
        assert stuck_logs[0].levelno == logging.WARNING

        run.gate.set()  # the hung handler returns at last: the slot is free again
        wait_until(lambda: run.ran == [waiting.id], "the next occurrence to run")
        wait_until(lambda: store.get_occurrence(waiting.id).status == "succeeded", "its settle")
        assert run.worker.stuck_slots == []
        assert stuck_gauge(run.observer) == 0
        assert any("returned" in r.getMessage() for r in caplog.records)
        # The late result of the timed-out attempt was discarded.
        assert store.get_occurrence(hung.id).status == "retry_wait"
    finally:
        run.stop()
    assert len([r for r in caplog.records if "is stuck" in r.getMessage()]) == 1


def test_claims_bought_ahead_are_given_back_when_every_slot_is_stuck(
    store, clock, make_runtime, driver
):
    hung = add_job(store, "job-hang", kind="hang", clock=clock)
    clock.advance(1)
    waiting = add_job(store, "job-next", kind="echo", clock=clock)
    run = HungWorker(store, make_runtime, driver, concurrency=1, prefetch=1)
    run.start()
    try:
        # One claim transaction took both: the hung one runs, the other waits in the buffer.
        wait_until(lambda: store.get_occurrence(waiting.id).status == "running", "the prefetch")
        run.time_out()
        wait_until(
            lambda: store.get_occurrence(waiting.id).status != "running",
            "the buffered claim to be given back",
        )
        released = store.get_occurrence(waiting.id)
        assert (released.status, released.attempt, released.lease_owner) == ("retry_wait", 0, None)
        history = store.history(occurrence_id=waiting.id)
        [event] = [e for e in history if e.type == "occurrence_released"]
        assert event.data["reason"] == "worker_slots_stuck"
        assert store.get_occurrence(hung.id).status == "retry_wait"
        wait_until(lambda: feeder_settled(run.worker), "the feeder to settle")
        assert store.get_occurrence(waiting.id).lease_owner is None  # not claimed again

        # Another worker takes it at once, while the hung thread still lives.
        other = make_runtime({"echo": lambda ctx: "elsewhere"}, owner_id="w-other")
        assert other.run_next(kinds={"echo"}).status == "succeeded"
        assert run.ran == []
    finally:
        run.stop()


def test_with_a_free_slot_left_the_worker_keeps_running_the_rest(
    store, clock, make_runtime, driver
):
    hung = add_job(store, "job-hang", kind="hang", clock=clock)
    clock.advance(1)
    run = HungWorker(store, make_runtime, driver, concurrency=2, prefetch=0)
    run.start()
    try:
        run.time_out()
        wait_until(lambda: len(run.worker.stuck_slots) == 1, "the stuck slot")
        later = [add_job(store, f"job-{n}", kind="echo", clock=clock) for n in range(3)]
        wait_until(lambda: len(run.ran) == 3, "the free slot to run the rest")
        assert sorted(run.ran) == sorted(o.id for o in later)
        assert store.get_occurrence(hung.id).status == "retry_wait"
    finally:
        run.stop()


def test_a_graceful_stop_does_not_wait_for_a_stuck_slot(store, clock, make_runtime, driver):
    add_job(store, "job-hang", kind="hang", clock=clock)
    run = HungWorker(store, make_runtime, driver, concurrency=1, prefetch=0)
    run.worker = jobledger.Worker(
        run.runtime,
        concurrency=1,
        prefetch=0,
        poll_interval=FAST_POLL,
        planner=False,
        grace_period=timedelta(hours=1),
    )
    box: list[jobledger.WorkerSummary] = []
    thread = threading.Thread(
        target=lambda: box.append(run.worker.run(install_signal_handlers=False)), daemon=True
    )
    thread.start()
    assert run.worker.wait_until_running(WAIT_S) and run.started.wait(WAIT_S)
    run.time_out()
    wait_until(lambda: len(run.worker.stuck_slots) == 1, "the stuck slot")
    try:
        # Its attempt is settled: nothing to wait an hour's grace period for, nothing to give back.
        stop_worker(run.worker, thread, timeout_s=WAIT_S)
        assert not thread.is_alive(), "the stop waited for the stuck slot"
        [summary] = box
        assert (summary.forced, summary.released) == (False, [])
    finally:
        run.gate.set()


def test_the_registry_entry_carries_the_stuck_slots(store):
    status: dict[str, Any] = {"stuckSlots": 0, "stuckOccurrences": []}
    ticks = FakeMonotonic()
    keeper = Housekeeper(
        store,
        owner_id="w-registry",
        options=WorkerOptions(planner=False, heartbeat_interval=timedelta(seconds=10)),
        kinds=frozenset({"echo"}),
        observer=jobledger.engine.observe.NO_OBSERVER,
        monotonic=ticks,
        record=lambda name, amount: None,
        poll_timeout=lambda: 1.0,
        status=lambda: dict(status),
    )
    keeper.announce()
    [entry] = store.list_workers()
    assert entry.info["stuckSlots"] == 0 and entry.info["kinds"] == ["echo"]
    started = entry.started_at
    status.update(stuckSlots=1, stuckOccurrences=["occ-1"])
    keeper.run_due(ticks.now + 10)
    [entry] = store.list_workers()
    assert (entry.info["stuckSlots"], entry.info["stuckOccurrences"]) == (1, ["occ-1"])
    assert entry.info["kinds"] == ["echo"] and entry.started_at == started
    keeper.farewell()
    assert store.list_workers() == []


def run_in_thread(
    worker: jobledger.Worker,
) -> tuple[threading.Thread, list[jobledger.WorkerSummary]]:
    box: list[jobledger.WorkerSummary] = []
    thread = threading.Thread(
        target=lambda: box.append(worker.run(install_signal_handlers=False)), daemon=True
    )
    thread.start()
    return thread, box


def test_a_worker_whose_every_slot_is_stuck_past_the_grace_gives_up(
    store, clock, make_runtime, driver
):
    hung = add_job(store, "job-hang", kind="hang", clock=clock)
    clock.advance(1)
    waiting = add_job(store, "job-next", kind="echo", clock=clock)
    run = HungWorker(
        store, make_runtime, driver, concurrency=1, prefetch=1, stuck_grace=timedelta(seconds=10)
    )
    thread, box = run_in_thread(run.worker)
    try:
        assert run.worker.wait_until_running(WAIT_S) and run.started.wait(WAIT_S)
        wait_until(lambda: store.get_occurrence(waiting.id).status == "running", "the prefetch")
        run.time_out()
        wait_until(lambda: len(run.worker.stuck_slots) == 1, "the stuck slot")
        # Within the grace the worker waits for the handler to return (the buffer is given back).
        run.monotonic.now += 9.5
        assert not run.worker._stuck.past_grace()
        assert thread.is_alive()
        wait_until(lambda: store.get_occurrence(waiting.id).lease_owner is None, "the give-back")
        run.monotonic.now += 0.5  # exactly the grace
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the worker did not give up"
        [summary] = box
        assert summary.gave_up_stuck and not summary.forced
        # Nothing is held: the stuck attempt is settled and renewed no more, the buffered claim
        # given back with its attempt, the worker's registry entry gone; another worker takes
        # the work at once while the hung thread still runs.
        after = store.get_occurrence(hung.id)
        assert (after.status, after.lease_owner) == ("retry_wait", None)
        assert after.last_error["code"] == "SCHEDULER_RUNTIME_TIMEOUT"
        released = store.get_occurrence(waiting.id)
        assert (released.status, released.attempt, released.lease_owner) == ("retry_wait", 0, None)
        assert run.runtime.keeper.tracked == 0
        assert store.list_workers() == []
        assert not run.gate.is_set() and [o.id for o in run.worker.stuck_slots] == [hung.id]
        other = make_runtime({"echo": lambda ctx: "elsewhere"}, owner_id="w-other")
        assert other.run_next(kinds={"echo"}).status == "succeeded"
    finally:
        run.gate.set()
        if thread.is_alive():
            stop_worker(run.worker, thread)


@pytest.mark.parametrize("grace", [timedelta(seconds=10), None], ids=["one-slot-free", "no-grace"])
def test_a_worker_with_a_free_slot_or_no_grace_never_gives_up(
    store, clock, make_runtime, driver, grace
):
    add_job(store, "job-hang", kind="hang", clock=clock)
    concurrency = 2 if grace is not None else 1
    run = HungWorker(
        store, make_runtime, driver, concurrency=concurrency, prefetch=0, stuck_grace=grace
    )
    thread, box = run_in_thread(run.worker)
    try:
        assert run.worker.wait_until_running(WAIT_S) and run.started.wait(WAIT_S)
        run.time_out()
        wait_until(lambda: len(run.worker.stuck_slots) == 1, "the stuck slot")
        run.monotonic.now += 24 * 3600
        assert not run.worker._stuck.past_grace()
        assert thread.is_alive()
    finally:
        run.gate.set()
        stop_worker(run.worker, thread)
    [summary] = box
    assert not summary.gave_up_stuck


@pytest.mark.parametrize("value", [timedelta(0), 30, "5m"])
def test_a_bad_stuck_grace_is_a_coded_error(value):
    with pytest.raises(jobledger.SchedulerError) as bad:
        WorkerOptions(stuck_grace=value)
    assert bad.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert bad.value.details["field"] == "stuck_grace"
