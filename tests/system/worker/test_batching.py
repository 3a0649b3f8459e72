"""Group commit (Settler) and claims made ahead (ClaimAhead): threads on a real store, with the
store call held so every interleaving is chosen by the test, not by the scheduler."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import jobledger
from jobledger.engine import batching
from jobledger.engine.batching import ClaimAhead, Claimed, Settler
from jobledger.engine.heartbeat import ManualHeartbeat

from .conftest import AUTHORITY, LEASE_MS, add_job, event_types, stop_worker

WAIT_S = 10.0


def _enqueue(store: jobledger.Store, clock: Any, count: int, job_id: str = "job-b") -> None:
    store.create_job(id=job_id, kind="echo", authority=AUTHORITY)
    for index in range(count):
        store.enqueue_occurrence(
            job_id=job_id, scheduled_for=clock() + index, trigger_key=f"t{index}"
        )
    clock.advance(count)


def _running(store: jobledger.Store, clock: Any, count: int) -> list[jobledger.Occurrence]:
    _enqueue(store, clock, count)
    claimed = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=count)
    assert len(claimed) == count
    return claimed


def _settlement(occurrence: jobledger.Occurrence, **options: Any) -> jobledger.Settlement:
    options.setdefault("outcome", "succeeded")
    options.setdefault("fence", occurrence.fence)
    return jobledger.Settlement(occurrence_id=occurrence.id, owner_id="w1", **options)


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        if condition():
            return
        done.wait(0.005)
    raise AssertionError(f"never happened: {what}")


class Outcomes:
    """Callbacks for settlements: each records its own outcome under its own name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_name: dict[str, Any] = {}
        self.threads: set[str] = set()

    def callback(self, name: str) -> Callable[[Any], None]:
        def done(outcome: Any) -> None:
            with self._lock:
                assert name not in self.by_name, f"{name} reported twice"
                self.by_name[name] = outcome
                self.threads.add(threading.current_thread().name)

        return done

    def wait_for(self, count: int) -> None:
        _wait_until(lambda: len(self.by_name) >= count, f"{count} outcomes")


class HeldStore:
    """The real store; ``settle_batch`` calls are recorded and can be held or made to fail."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.batches: list[list[str]] = []
        self.calls = 0
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.hold.set()
        self.fault: BaseException | None = None

    def settle_batch(self, settlements: list[jobledger.Settlement], **starts: Any) -> Any:
        self.calls += 1
        self.entered.set()
        assert self.hold.wait(WAIT_S)
        if self.fault is not None:
            raise self.fault
        self.batches.append([s.occurrence_id for s in settlements])
        return self._store.settle_batch(settlements, **starts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@pytest.fixture
def settler_for():
    made: list[Settler] = []

    def make(store: Any) -> Settler:
        settler = Settler(store)
        settler.start()
        made.append(settler)
        return settler

    yield make
    for settler in made:
        settler.close(1.0)


# -- Settler ----------------------------------------------------------------------------------


def test_settlements_handed_over_during_a_commit_share_the_next_one(store, clock, settler_for):
    claimed = _running(store, clock, 5)
    held = HeldStore(store)
    settler = settler_for(held)
    outcomes = Outcomes()
    held.hold.clear()
    settler.submit(_settlement(claimed[0]), outcomes.callback("0"))
    assert held.entered.wait(WAIT_S)  # the first commit is in progress (and held)
    for index in range(1, 5):
        # Handing over never waits for a commit: a slot goes on to its next occurrence.
        settler.submit(_settlement(claimed[index]), outcomes.callback(str(index)))
    assert settler.pending == 5
    assert outcomes.by_name == {}  # nothing is reported before its commit
    held.hold.set()
    outcomes.wait_for(5)
    assert held.batches == [[claimed[0].id], [o.id for o in claimed[1:]]]
    assert (settler.batches, settler.committed) == (2, 5)
    for index, occurrence in enumerate(claimed):
        own = outcomes.by_name[str(index)]
        assert (own.id, own.status) == (occurrence.id, "succeeded")
    assert outcomes.threads == {"jobledger-settler"}
    assert all(store.get_occurrence(o.id).status == "succeeded" for o in claimed)


def test_a_lost_lease_reaches_only_its_own_attempt(store, clock, settler_for):
    claimed = _running(store, clock, 4)
    held = HeldStore(store)
    settler = settler_for(held)
    outcomes = Outcomes()
    held.hold.clear()
    settler.submit(_settlement(claimed[0]), outcomes.callback("leader"))
    assert held.entered.wait(WAIT_S)
    settler.submit(_settlement(claimed[1]), outcomes.callback("ok-1"))
    settler.submit(_settlement(claimed[2], fence=claimed[2].fence + 5), outcomes.callback("lost"))
    settler.submit(
        _settlement(claimed[3], outcome="failed", retryable=False), outcomes.callback("failed")
    )
    held.hold.set()
    outcomes.wait_for(4)
    assert len(held.batches) == 2
    assert len(held.batches[1]) == 3  # the fenced-out one shared the transaction
    assert outcomes.by_name["leader"].status == "succeeded"
    assert outcomes.by_name["ok-1"].status == "succeeded"
    assert isinstance(outcomes.by_name["lost"], jobledger.LeaseLost)
    assert outcomes.by_name["failed"].status == "dead_letter"
    assert settler.committed == 3
    assert store.get_occurrence(claimed[2].id).status == "running"  # untouched


def test_an_invalid_settlement_fails_its_caller_before_joining_a_batch(store, clock, settler_for):
    claimed = _running(store, clock, 1)
    held = HeldStore(store)
    settler = settler_for(held)
    outcomes = Outcomes()
    with pytest.raises(jobledger.InvalidArgument):
        settler.submit(_settlement(claimed[0], outcome="maybe"), outcomes.callback("bad"))
    assert held.calls == 0
    assert outcomes.by_name == {}
    settler.submit(_settlement(claimed[0]), outcomes.callback("good"))
    outcomes.wait_for(1)
    assert outcomes.by_name["good"].status == "succeeded"


def test_storage_failures_are_retried_then_committed_when_the_fault_clears(
    store, clock, settler_for, monkeypatch
):
    monkeypatch.setattr(batching, "RETRY_FIRST_S", 0.001)
    monkeypatch.setattr(batching, "RETRY_MAX_S", 0.01)
    claimed = _running(store, clock, 3)
    held = HeldStore(store)
    held.fault = jobledger.StorageUnavailable("disk gone")
    settler = settler_for(held)
    outcomes = Outcomes()
    for index, occurrence in enumerate(claimed):
        settler.submit(_settlement(occurrence), outcomes.callback(str(index)))
    _wait_until(lambda: held.calls >= 3, "three failed attempts")
    assert outcomes.by_name == {}  # kept, not reported as failed
    assert settler.pending == 3
    assert all(store.get_occurrence(o.id).status == "running" for o in claimed)
    held.fault = None
    outcomes.wait_for(3)
    assert [sorted(batch) for batch in held.batches] == [sorted(o.id for o in claimed)]
    assert all(outcomes.by_name[str(i)].status == "succeeded" for i in range(3))
    assert (settler.batches, settler.committed, settler.pending) == (1, 3, 0)


def test_an_error_that_is_not_a_storage_outage_reaches_every_member_at_once(
    store, clock, settler_for
):
    claimed = _running(store, clock, 2)
    held = HeldStore(store)
    held.fault = jobledger.SchedulerError("broken", code="SCHEDULER_DATA_CORRUPT")
    settler = settler_for(held)
    outcomes = Outcomes()
    held.hold.clear()
    settler.submit(_settlement(claimed[0]), outcomes.callback("0"))
    assert held.entered.wait(WAIT_S)
    settler.submit(_settlement(claimed[1]), outcomes.callback("1"))
    held.hold.set()
    outcomes.wait_for(2)
    assert held.calls == 2  # one per batch; neither retried
    assert all(outcomes.by_name[str(i)] is held.fault for i in range(2))


def test_close_flushes_what_was_handed_over(store, clock):
    claimed = _running(store, clock, 3)
    held = HeldStore(store)
    settler = Settler(held)
    settler.start()
    outcomes = Outcomes()
    held.hold.clear()
    for index, occurrence in enumerate(claimed):
        settler.submit(_settlement(occurrence), outcomes.callback(str(index)))
    assert held.entered.wait(WAIT_S)
    closed: list[bool] = []
    closer = threading.Thread(target=lambda: closed.append(settler.close(WAIT_S)), daemon=True)
    closer.start()
    held.hold.set()
    closer.join(WAIT_S)
    assert closed == [True]
    assert sorted(id_ for batch in held.batches for id_ in batch) == sorted(o.id for o in claimed)
    assert all(outcomes.by_name[str(i)].status == "succeeded" for i in range(3))


def test_after_close_a_settlement_commits_in_the_callers_thread(store, clock):
    claimed = _running(store, clock, 1)
    held = HeldStore(store)
    settler = Settler(held)
    settler.start()
    assert settler.close(1.0) is True
    outcomes = Outcomes()
    settler.submit(_settlement(claimed[0]), outcomes.callback("late"))
    assert outcomes.by_name["late"].status == "succeeded"  # already, before submit returned
    assert outcomes.threads == {threading.current_thread().name}


def test_close_gives_up_on_a_lasting_outage_and_says_so(store, clock, monkeypatch):
    monkeypatch.setattr(batching, "RETRY_FIRST_S", 0.001)
    claimed = _running(store, clock, 2)
    held = HeldStore(store)
    held.fault = jobledger.StorageUnavailable("disk gone")
    settler = Settler(held)
    settler.start()
    outcomes = Outcomes()
    for index, occurrence in enumerate(claimed):
        settler.submit(_settlement(occurrence), outcomes.callback(str(index)))
    assert settler.close(0.1) is False
    outcomes.wait_for(2)
    assert all(isinstance(o, jobledger.SchedulerError) for o in outcomes.by_name.values())
    # Not committed: the leases run out and the occurrences run again (at-least-once).
    assert all(store.get_occurrence(o.id).status == "running" for o in claimed)


# -- ClaimAhead -------------------------------------------------------------------------------


class Feed:
    """A ClaimAhead over the real store with recording hooks, and the test's stop event."""

    def __init__(self, store: jobledger.Store, *, capacity: int, fail_first: bool = False):
        self.store = store
        self.limits: list[int] = []
        self.tracked: dict[int, Claimed] = {}
        self.waits = 0
        self.errors: list[BaseException] = []
        self.fail_first = fail_first
        self.work = threading.Event()  # set: wait_for_work returns at once
        self.stop = threading.Event()
        self.feed = ClaimAhead(
            self._claim,
            capacity=capacity,
            track=lambda entry: self.tracked.__setitem__(id(entry), entry),
            untrack=lambda entry: self.tracked.pop(id(entry), None),
            wait_for_work=self._wait_for_work,
            generation=lambda: store.work_signal.generation,
            on_error=self.errors.append,
        )

    def _claim(self, limit: int, free: int, start: int) -> list[jobledger.Occurrence]:
        self.limits.append(limit)
        if self.fail_first:
            self.fail_first = False
            raise jobledger.StorageUnavailable("busy")
        return self.store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=limit)

    def _wait_for_work(self, seen: int, stop: threading.Event) -> None:
        self.waits += 1
        for _ in range(int(WAIT_S / 0.005)):
            if self.work.is_set() or stop.is_set():
                return
            stop.wait(0.005)

    def held(self) -> int:
        return len(self.store.list_occurrences(status="running", limit=1000).items)

    def feeder_waiting_for_room(self) -> bool:
        with self.feed._changed:
            return bool(self.feed._changed._waiters) and self.feed._room() <= 0  # type: ignore[attr-defined]


def test_the_feeder_claims_ahead_up_to_capacity_in_one_transaction(store, clock):
    _enqueue(store, clock, 20)
    feed = Feed(store, capacity=5)
    feed.feed.start()
    try:
        _wait_until(feed.feeder_waiting_for_room, "the buffer to fill")
        assert feed.limits == [5]  # one claim transaction for the whole buffer
        assert feed.held() == 5
        assert len(feed.tracked) == 5  # buffered claims are lease holders for the keeper
        first = feed.feed.take(feed.stop)
        second = feed.feed.take(feed.stop)
        assert first.occurrence.id != second.occurrence.id
        assert len(feed.tracked) == 3  # a taken claim is the slot's attempt's to keep now
        _wait_until(feed.feeder_waiting_for_room, "the feeder to see there is no room")
        assert feed.limits == [5]  # busy slots still count: nothing more is claimed
        feed.feed.done()
        feed.feed.done()
        _wait_until(lambda: feed.limits == [5, 2], "one refill for both free places")
        _wait_until(feed.feeder_waiting_for_room, "the refill to land")
        assert feed.held() == 7  # 5 buffered + the 2 taken ones (not settled in this test)
    finally:
        left = feed.feed.stop()
    assert len(left) == 5
    assert feed.tracked == {}


def test_the_feeder_never_holds_more_than_its_capacity(store, clock):
    _enqueue(store, clock, 30)
    feed = Feed(store, capacity=4)
    feed.work.set()
    high_water: list[int] = []
    feed.feed.start()
    try:
        for _ in range(12):
            claimed = feed.feed.take(feed.stop)
            assert claimed is not None
            high_water.append(feed.held())
            store.settle(
                occurrence_id=claimed.occurrence.id,
                owner_id="w1",
                fence=claimed.occurrence.fence,
                outcome="succeeded",
            )
            feed.feed.done()
    finally:
        left = feed.feed.stop()
    assert max(high_water) <= 4
    assert all(limit <= 4 for limit in feed.limits)
    assert len(left) <= 4


def test_a_short_claim_waits_for_work_then_claims_again(store, clock):
    add_job(store, clock=clock)  # one occurrence only
    feed = Feed(store, capacity=3)
    feed.feed.start()
    try:
        _wait_until(lambda: feed.waits == 1, "the feeder to wait for work")
        assert feed.limits == [3]
        assert feed.feed.take(feed.stop) is not None
        store.enqueue_occurrence(job_id="job-1", scheduled_for=clock(), trigger_key="more")
        feed.work.set()  # the enqueue's wake-up
        _wait_until(lambda: len(feed.limits) >= 2, "a second claim")
        again = feed.feed.take(feed.stop)
        assert again.occurrence.trigger_key == "more"
    finally:
        feed.feed.stop()


def test_a_failed_claim_is_reported_and_tried_again(store, clock):
    add_job(store, clock=clock)
    feed = Feed(store, capacity=2, fail_first=True)
    feed.work.set()
    feed.feed.start()
    try:
        claimed = feed.feed.take(feed.stop)
        assert claimed is not None
        assert [type(e) for e in feed.errors] == [jobledger.StorageUnavailable]
        assert feed.limits[:2] == [2, 2]
    finally:
        feed.feed.stop()


def test_a_buffered_claim_whose_lease_was_lost_is_skipped_and_not_given_back(store, clock):
    _enqueue(store, clock, 2)
    feed = Feed(store, capacity=2)
    feed.feed.start()
    try:
        _wait_until(feed.feeder_waiting_for_room, "the buffer to fill")
        lost_entry = next(iter(feed.tracked.values()))
        lost_entry.lease_lost(jobledger.LeaseLost("taken over"))
        taken = feed.feed.take(feed.stop)
        assert taken is not lost_entry
        assert taken.occurrence.id != lost_entry.occurrence.id
    finally:
        left = feed.feed.stop()
    assert left == []  # the lost one is not ours to release, the taken one is the slot's
    assert feed.tracked == {}


def test_take_returns_none_once_stopping(store, clock):
    feed = Feed(store, capacity=1)
    stop = threading.Event()
    stop.set()
    assert feed.feed.take(stop) is None


# -- the worker's use of them -----------------------------------------------------------------


def _run_worker(worker: jobledger.Worker) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []
    thread = threading.Thread(
        target=lambda: box.append(worker.run(install_signal_handlers=False)), daemon=True
    )
    thread.start()
    assert worker.wait_until_running(WAIT_S)
    return thread, box


def _stop(worker: jobledger.Worker, thread: threading.Thread, store: jobledger.Store) -> None:
    stop_worker(worker, thread)
    assert not thread.is_alive()


def test_buffered_claims_are_renewed_by_the_keeper_and_given_back_at_stop(
    store, clock, make_runtime
):
    _enqueue(store, clock, 6)
    started, release = threading.Event(), threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        started.set()
        release.wait(WAIT_S)
        return "done"

    renew_batches: list[int] = []

    def renew_batch(renewals: list[jobledger.Renewal]) -> Any:
        renew_batches.append(len(renewals))
        return store.renew_batch(renewals)

    driver = ManualHeartbeat()
    runtime = make_runtime(
        {"echo": handler},
        heartbeat=driver,
        owner_id="w",
        store=_Spy(store, renew_batch=renew_batch),
    )
    worker = jobledger.Worker(
        runtime, concurrency=1, prefetch=3, poll_interval=timedelta(milliseconds=20), planner=False
    )
    thread, box = _run_worker(worker)
    try:
        assert started.wait(WAIT_S)
        _wait_until(lambda: runtime.keeper.tracked == 4, "one running + three buffered")
        assert driver.active == 1  # one heartbeat for the whole runtime
        driver.tick()
        assert renew_batches == [4]  # every held lease in one transaction
        running = store.list_occurrences(status="running", limit=100).items
        assert len(running) == 4
        for occurrence in running:
            assert event_types(store, occurrence.id).count("occurrence_renewed") == 1
    finally:
        worker.stop()  # before the handler returns: its slot takes nothing more
        release.set()
        stop_worker(worker, thread)
    summary = box[0]
    assert summary.statuses == {"succeeded": 1}
    # What was still buffered went back, claimable at once, its attempt handed back. (At least
    # the three buffered above; the feeder may refill the finished slot's place before run()
    # notices the stop, and that claim goes back too.)
    assert len(summary.released) >= 3
    assert store.list_occurrences(status="running", limit=100).items == ()
    for occurrence in summary.released:
        after = store.get_occurrence(occurrence.id)
        assert (after.status, after.attempt, after.lease_owner) == ("retry_wait", 0, None)
    assert store.lease_holders() == []
    assert runtime.keeper.tracked == 0


class _Spy:
    def __init__(self, store: jobledger.Store, **overrides: Any) -> None:
        self._store = store
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_result_is_reported_only_after_its_settle_committed_and_its_lease_is_kept_meanwhile(
    store, clock, make_runtime
):
    occurrence = add_job(store, clock=clock)
    held = HeldStore(store)
    held.hold.clear()
    driver = ManualHeartbeat()
    runtime = make_runtime({"echo": lambda ctx: "done"}, heartbeat=driver)
    runtime.store = held
    worker = jobledger.Worker(
        runtime, poll_interval=timedelta(milliseconds=20), prefetch=0, planner=False
    )
    thread, _box = _run_worker(worker)
    try:
        assert held.entered.wait(WAIT_S)  # the handler returned; its settle is being committed
        assert worker.summary.statuses == {}
        driver.tick()  # the settling attempt's lease is still renewed
        assert event_types(store, occurrence.id)[-1] == "occurrence_renewed"
        held.hold.set()
        _wait_until(lambda: worker.summary.statuses["succeeded"] == 1, "the report")
        assert store.get_occurrence(occurrence.id).status == "succeeded"
    finally:
        held.hold.set()
        _stop(worker, thread, store)


def test_the_worker_drains_with_shared_transactions(store, clock, make_runtime):
    _enqueue(store, clock, 40, job_id="job-w")
    runtime = make_runtime({"echo": lambda ctx: ctx.occurrence.trigger_key})
    worker = jobledger.Worker(
        runtime, concurrency=4, poll_interval=timedelta(milliseconds=20), planner=False
    )
    thread, box = _run_worker(worker)
    _wait_until(lambda: worker.summary.statuses["succeeded"] == 40, "the drain")
    _stop(worker, thread, store)
    summary = box[0]
    assert summary.statuses == {"succeeded": 40}
    assert summary.released == []
    assert summary.claim_transactions < 40
    assert summary.settle_transactions < 40
    events = store.events(job_id="job-w", event_type="occurrence_claimed", limit=200)
    assert len(events) == 40 and len({e.occurrence_id for e in events}) == 40


def test_run_claimed_refuses_an_occurrence_it_does_not_hold(store, clock, make_runtime):
    occurrence = add_job(store, clock=clock)
    runtime = make_runtime({"echo": lambda ctx: "done"}, owner_id="me")
    with pytest.raises(jobledger.InvalidArgument):
        runtime.run_claimed(occurrence)  # still queued
    other = store.claim_next(owner_id="someone-else", lease_ms=LEASE_MS)
    with pytest.raises(jobledger.InvalidArgument):
        runtime.run_claimed(other)
    assert store.get_occurrence(occurrence.id).lease_owner == "someone-else"


def test_run_claimed_runs_a_batch_claim_to_completion(store, clock, make_runtime):
    add_job(store, clock=clock)
    runtime = make_runtime({"echo": lambda ctx: "done"}, owner_id="me")
    (claimed,) = runtime.claim_batch(5)
    result = runtime.run_claimed(claimed)
    assert (result.status, result.result) == ("succeeded", "done")
    assert runtime.claim_batch(5) == []


def _adaptive_feed(*, capacity: int, slots: int, window_s: float) -> ClaimAhead:
    """A feeder that is never started: only its sizing is under test."""
    return ClaimAhead(
        lambda limit, free, start: [],
        capacity=capacity,
        slots=slots,
        window_s=window_s,
        track=lambda entry: None,
        untrack=lambda entry: None,
        wait_for_work=lambda seen, stop: None,
        generation=lambda: 0,
        on_error=lambda exc: None,
    )


def test_the_adaptive_prefetch_holds_about_one_window_of_work():
    feed = _adaptive_feed(capacity=1 + 256, slots=1, window_s=0.2)
    assert feed.target == 257  # nothing observed yet: the ceiling
    feed._busy = 1
    feed.done(0.010)  # 10 ms handlers: 20 of them cover the 200 ms window
    assert feed.target == 1 + 20
    for _ in range(50):
        feed._busy = 1
        feed.done(0.000_1)  # the handlers got fast: back up to the ceiling
    assert feed.target == 257
    for _ in range(50):
        feed._busy = 1
        feed.done(5.0)  # slow work is never hoarded: one ahead of the slot at most
    assert feed.target == 2


def test_the_worker_teaches_the_prefetch_handler_time_not_commit_waits(store, clock, make_runtime):
    """What a worker's adaptive prefetch learns (``Attempt.work_seconds``) ends when the attempt
    hands its settlement over, not when the shared commit finishes; on the injected monotonic
    clock, so nothing sleeps."""
    now = [100.0]

    def handler(ctx: jobledger.JobContext) -> str:
        now[0] += 0.002  # the handler runs 2 ms
        return "ok"

    runtime = make_runtime({"echo": handler}, monotonic=lambda: now[0])

    class SlowCommit:
        def submit(self, settlement: jobledger.Settlement, done: Any) -> None:
            now[0] += 0.050  # the shared commit takes 50 ms more
            done(store.settle_batch([settlement])[0])

    learned: list[float] = []
    add_job(store, clock=clock)
    [claimed] = runtime.claim_batch(1)
    runtime.attempt(
        claimed, commit=SlowCommit(), on_report=lambda a: learned.append(a.work_seconds)
    ).run()
    assert learned == [pytest.approx(0.002)]

    # An attempt that ends without a settlement (its lease was lost) learns its whole run.
    add_job(store, "job-2", clock=clock)
    [claimed] = runtime.claim_batch(1)
    store.cancel_occurrence(occurrence_id=claimed.id, actor="test", reason="gone")
    runtime.attempt(
        claimed,
        commit=SlowCommit(),
        claimed_at=now[0] - 3600,  # stale: revalidated with a renew, which finds the lease gone
        on_report=lambda a: learned.append(a.work_seconds),
    ).run()
    assert len(learned) == 2
    assert learned[-1] == pytest.approx(0.0)
