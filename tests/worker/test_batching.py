"""Group commit (SettleBatcher) and shared claims (ClaimFeed) with threads on a real store."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import jobledger
from jobledger.batching import ClaimFeed, SettleBatcher

from .conftest import AUTHORITY, LEASE_MS, add_job

WAIT_S = 10.0


def _running(store: jobledger.Store, clock: Any, count: int) -> list[jobledger.Occurrence]:
    store.create_job(id="job-b", kind="echo", authority=AUTHORITY)
    for index in range(count):
        store.enqueue_occurrence(
            job_id="job-b", scheduled_for=clock() + index, trigger_key=f"t{index}"
        )
    clock.advance(count)
    claimed = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=count)
    assert len(claimed) == count
    return claimed


def _settlement(occurrence: jobledger.Occurrence, **options: Any) -> jobledger.Settlement:
    options.setdefault("outcome", "succeeded")
    options.setdefault("fence", occurrence.fence)
    return jobledger.Settlement(occurrence_id=occurrence.id, owner_id="w1", **options)


class RecordingStore:
    """The real store; settle_batch / claim_batch calls are recorded and can be held."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.batches: list[list[str]] = []
        self.limits: list[int] = []
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def settle_batch(self, settlements: list[jobledger.Settlement]) -> Any:
        self.batches.append([s.occurrence_id for s in settlements])
        self.entered.set()
        assert self.hold.wait(WAIT_S)
        return self._store.settle_batch(settlements)

    def claim(self, limit: int) -> list[jobledger.Occurrence]:
        self.limits.append(limit)
        self.entered.set()
        assert self.hold.wait(WAIT_S)
        return self._store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _in_threads(count: int, target: Any) -> tuple[list[threading.Thread], dict[int, Any]]:
    results: dict[int, Any] = {}

    def run(index: int) -> None:
        try:
            results[index] = target(index)
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    return threads, results


def _wait_for_waiters(condition: threading.Condition, expected: int) -> None:
    """Until ``expected`` threads sleep on ``condition`` (its waiter list is the only witness)."""
    deadline = threading.Event()
    for _ in range(int(WAIT_S / 0.005)):
        with condition:
            if len(condition._waiters) >= expected:  # type: ignore[attr-defined]
                return
        deadline.wait(0.005)
    raise AssertionError(f"{expected} threads never waited")


# -- SettleBatcher ----------------------------------------------------------------------------


def test_settles_that_arrive_during_a_commit_share_the_next_one(store, clock):
    claimed = _running(store, clock, 5)
    recording = RecordingStore(store)
    batcher = SettleBatcher(recording)  # type: ignore[arg-type]
    recording.hold.clear()
    first, first_result = _in_threads(1, lambda i: batcher.settle(_settlement(claimed[0])))
    first[0].start()
    assert recording.entered.wait(WAIT_S)
    others, results = _in_threads(4, lambda i: batcher.settle(_settlement(claimed[i + 1])))
    for thread in others:
        thread.start()
    _wait_for_waiters(batcher._changed, 4)
    recording.hold.set()
    for thread in first + others:
        thread.join(WAIT_S)
    assert recording.batches[0] == [claimed[0].id]
    assert sorted(recording.batches[1]) == sorted(o.id for o in claimed[1:])
    assert len(recording.batches) == 2
    assert first_result[0].id == claimed[0].id
    assert {results[i].id for i in range(4)} == {o.id for o in claimed[1:]}
    assert all(store.get_occurrence(o.id).status == "succeeded" for o in claimed)


def test_a_lost_lease_is_raised_only_to_its_own_caller(store, clock):
    claimed = _running(store, clock, 3)
    recording = RecordingStore(store)
    batcher = SettleBatcher(recording)  # type: ignore[arg-type]
    recording.hold.clear()
    leader, _ = _in_threads(1, lambda i: batcher.settle(_settlement(claimed[0])))
    leader[0].start()
    assert recording.entered.wait(WAIT_S)
    fences = [claimed[1].fence, claimed[2].fence + 5]  # the second is fenced out
    threads, results = _in_threads(
        2, lambda i: batcher.settle(_settlement(claimed[i + 1], fence=fences[i]))
    )
    for thread in threads:
        thread.start()
    _wait_for_waiters(batcher._changed, 2)
    recording.hold.set()
    for thread in leader + threads:
        thread.join(WAIT_S)
    assert len(recording.batches) == 2 and len(recording.batches[1]) == 2
    assert results[0].status == "succeeded"
    assert isinstance(results[1], jobledger.LeaseLost)
    assert store.get_occurrence(claimed[2].id).status == "running"


def test_an_invalid_settlement_fails_its_caller_before_joining_a_batch(store, clock):
    claimed = _running(store, clock, 1)
    recording = RecordingStore(store)
    batcher = SettleBatcher(recording)  # type: ignore[arg-type]
    with pytest.raises(jobledger.InvalidArgument):
        batcher.settle(_settlement(claimed[0], outcome="maybe"))
    assert recording.batches == []
    assert batcher.settle(_settlement(claimed[0])).status == "succeeded"


def test_a_storage_failure_reaches_every_member_of_the_batch(store, clock):
    claimed = _running(store, clock, 2)

    class Failing:
        def settle_batch(self, settlements: Any) -> Any:
            raise jobledger.StorageUnavailable("disk gone")

    batcher = SettleBatcher(Failing())  # type: ignore[arg-type]
    for occurrence in claimed:
        with pytest.raises(jobledger.StorageUnavailable):
            batcher.settle(_settlement(occurrence))
    assert batcher._leading is False  # the next caller can lead again


# -- ClaimFeed --------------------------------------------------------------------------------


def test_one_claim_serves_every_slot_waiting_for_it(store, clock):
    add_job(store, clock=clock)
    for index in range(4):
        store.enqueue_occurrence(job_id="job-1", scheduled_for=clock(), trigger_key=f"t{index}")
    recording = RecordingStore(store)
    feed = ClaimFeed(recording.claim, max_batch=8)
    recording.hold.clear()
    first, first_result = _in_threads(1, lambda i: feed.take())
    first[0].start()
    assert recording.entered.wait(WAIT_S)  # slot 0 claims for itself alone
    others, results = _in_threads(3, lambda i: feed.take())
    for thread in others:
        thread.start()
    _wait_for_waiters(feed._lock, 3)
    recording.hold.set()
    for thread in first + others:
        thread.join(WAIT_S)
    assert recording.limits == [1, 3]  # then one transaction for the three that waited
    taken = [first_result[0]] + [results[i] for i in range(3)]
    assert all(isinstance(o, jobledger.Occurrence) for o in taken)
    assert len({o.id for o in taken}) == 4
    assert feed.drain() == []


def test_a_short_claim_tells_every_waiting_slot_there_is_nothing(store, clock):
    add_job(store, clock=clock)  # one occurrence only
    recording = RecordingStore(store)
    feed = ClaimFeed(recording.claim, max_batch=8)
    recording.hold.clear()
    threads, results = _in_threads(3, lambda i: feed.take())
    threads[0].start()
    assert recording.entered.wait(WAIT_S)
    for thread in threads[1:]:
        thread.start()
    _wait_for_waiters(feed._lock, 2)
    recording.hold.set()
    for thread in threads:
        thread.join(WAIT_S)
    # The first claim (limit 1) took the only occurrence; the second came back empty for both.
    assert recording.limits == [1, 2]
    assert sorted(type(r).__name__ for r in results.values()) == [
        "NoneType",
        "NoneType",
        "Occurrence",
    ]


def test_a_failed_claim_lets_the_next_slot_try(store, clock):
    add_job(store, clock=clock)
    calls: list[int] = []

    def flaky(limit: int) -> list[jobledger.Occurrence]:
        calls.append(limit)
        if len(calls) == 1:
            raise jobledger.StorageUnavailable("busy")
        return store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=limit)

    feed = ClaimFeed(flaky, max_batch=4)
    with pytest.raises(jobledger.StorageUnavailable):
        feed.take()
    assert feed.take() is not None
    assert feed.take() is None


def test_the_worker_drains_with_shared_transactions(store, clock, make_runtime):
    store.create_job(id="job-w", kind="echo", authority=AUTHORITY)
    for index in range(40):
        store.enqueue_occurrence(job_id="job-w", scheduled_for=clock(), trigger_key=f"t{index}")
    runtime = make_runtime({"echo": lambda ctx: ctx.occurrence.trigger_key})
    worker = jobledger.Worker(runtime, concurrency=4, poll_interval=3_600_000)
    done = threading.Event()
    box: list[jobledger.WorkerSummary] = []

    def run() -> None:
        box.append(worker.run(install_signal_handlers=False))
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    for _ in range(int(WAIT_S / 0.01)):
        if worker.summary.statuses["succeeded"] == 40:
            break
        done.wait(0.01)
    worker.stop()
    thread.join(WAIT_S)
    assert box[0].statuses == {"succeeded": 40}
    assert box[0].released == []
    events = store.history(job_id="job-w", limit=200)
    claims = [e for e in events if e.type == "occurrence_claimed"]
    assert len(claims) == 40 and len({e.occurrence_id for e in claims}) == 40


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
