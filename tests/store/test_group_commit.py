"""Group commit (store/group_commit.py): concurrent enqueues of one store share one write
transaction; an item that fails fails alone; a failed transaction fails every item of its group;
every call returns only after its own occurrence is committed. On both stores.

The groups are made deterministic: a first caller holds the leader's transaction open (its body
waits on an event) until the other callers have queued behind it; they then form the next group,
written in one transaction by the first of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import jobledger
from jobledger import SchedulerError
from jobledger.store.group_commit import GroupCommit
from jobledger.store.tx import Tx
from tests.store.helpers import call_all, grouped, hold_leader, wait_queued

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _enqueue(store: jobledger.Store, job_id: str, key: str) -> Callable[[], jobledger.Occurrence]:
    # A batch of one takes the store's write transaction on both stores (PostgreSQL's
    # enqueue_occurrence of a known job is one autocommit statement instead, grouped by the
    # server's own WAL flush, not by this module).
    return lambda: store.enqueue_batch([jobledger.EnqueueRequest(job_id, 0, key)])[0]


def test_concurrent_enqueues_share_one_transaction_and_a_failing_one_fails_alone(store):
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    [first] = store.enqueue_batch([jobledger.EnqueueRequest("j", 0, "key:taken", payload={"v": 1})])
    group, writes = grouped(store)
    leader, release = hold_leader(group)
    calls = [
        _enqueue(store, "j", "a"),
        _enqueue(store, "nope", "b"),  # an unknown job: fails alone
        _enqueue(store, "j", "c"),
        lambda: store.enqueue_batch(  # a reused key with another payload: fails alone
            [jobledger.EnqueueRequest("j", 0, "key:taken", payload={"v": 2}, once_per_trigger=True)]
        ),
        _enqueue(store, "j", "d"),
    ]
    threads, outcomes = call_all(calls)
    wait_queued(group, len(calls))
    release.set()
    leader.join(30)
    for thread in threads:
        thread.join(30)
    assert writes.count == 2  # the held leader's, then one for all five
    ok = [outcomes[0], outcomes[2], outcomes[4]]
    assert all(isinstance(o, jobledger.Occurrence) for o in ok), outcomes
    assert isinstance(outcomes[1], SchedulerError) and outcomes[1].code == "SCHEDULER_NOT_FOUND"
    assert isinstance(outcomes[3], SchedulerError)
    assert outcomes[3].code == "SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH"
    for occurrence in ok:
        stored = store.get_occurrence(occurrence.id)
        assert stored is not None and stored.status == "queued"
        assert [e.type for e in store.history(occurrence_id=occurrence.id)] == [
            "occurrence_enqueued"
        ]
    counts = {row.status: row.count for row in store.count_occurrences()}
    assert counts == {"queued": 4}  # the three and the key's first
    assert store.get_occurrence(first.id) is not None
    assert store.verify().ok


def test_a_failed_transaction_fails_every_item_of_its_group_and_commits_none(store):
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    group, writes = grouped(store)
    leader, release = hold_leader(group)

    def broken(tx: Tx) -> tuple[list[object], bool]:
        raise OSError("the disk went away")  # not an item's refusal: the transaction's failure

    calls = [
        _enqueue(store, "j", "a"),
        lambda: group.run(broken),
        _enqueue(store, "j", "b"),
    ]
    threads, outcomes = call_all(calls)
    wait_queued(group, len(calls))
    release.set()
    leader.join(30)
    for thread in threads:
        thread.join(30)
    assert writes.count == 2
    assert all(isinstance(o, OSError) for o in outcomes), outcomes
    assert sum(row.count for row in store.count_occurrences()) == 0
    assert store.verify().ok


def test_a_lone_caller_writes_alone_and_many_threads_lose_nothing(store):
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    group, writes = grouped(store)
    occurrence = _enqueue(store, "j", "solo")()
    assert writes.count == 1 and store.get_occurrence(occurrence.id) is not None
    returned: list[str] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        for n in range(25):
            made = _enqueue(store, "j", f"t{index}-{n}")()
            with lock:
                returned.append(made.id)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(set(returned)) == 200
    assert all(store.get_occurrence(i) is not None for i in returned)
    assert sum(row.count for row in store.count_occurrences()) == 201
    assert writes.count <= 201  # grouped when the threads met (never more than one each)
    assert store.verify().ok


@pytest.mark.parametrize("size", [2, 3])
def test_a_flow_in_a_group_is_all_or_nothing(store, size):
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    group, _ = grouped(store)
    leader, release = hold_leader(group)
    requests = [jobledger.EnqueueRequest("j", 0, f"f{i}") for i in range(size)]
    bad = [*requests[:-1], jobledger.EnqueueRequest("missing", 0, "f-last")]
    calls = [lambda: store.enqueue_batch(bad), lambda: store.enqueue_batch(requests)]
    threads, outcomes = call_all(calls)
    wait_queued(group, 2)
    release.set()
    leader.join(30)
    for thread in threads:
        thread.join(30)
    assert isinstance(outcomes[0], SchedulerError)
    assert isinstance(outcomes[1], list) and len(outcomes[1]) == size
    assert sum(row.count for row in store.count_occurrences()) == size


def test_a_child_forked_while_a_group_is_in_flight_enqueues(store):
    # The child has only the forking thread: the leader holding the parent's group open is not
    # there, so a child that kept the parent's group state would queue behind nobody forever.
    import os

    store.create_job(id="j", kind="k", authority=AUTHORITY)
    release = threading.Event()

    parent = os.getpid()

    def held_write(body):
        # The parent's leader waits before its transaction (no database lock is held meanwhile);
        # the child's writes go straight through.
        if os.getpid() == parent:
            assert release.wait(30)
        return store._write(body)

    group: GroupCommit[object] = GroupCommit(held_write)
    store.__dict__["_enqueue_group"] = group
    leader = threading.Thread(target=_enqueue(store, "j", "from-the-parent"))
    leader.start()
    deadline = time.monotonic() + 30
    while not group._leading:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its enqueue must commit on its own
            code = 1
            try:
                done = threading.Event()

                def enqueue() -> None:
                    _enqueue(store, "j", "from-the-child")()
                    done.set()

                threading.Thread(target=enqueue, daemon=True).start()
                code = 0 if done.wait(20) else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 30
        while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            assert time.monotonic() < deadline, "the child never finished"
            time.sleep(0.01)
        assert os.waitstatus_to_exitcode(waited[1]) == 0, "the child's enqueue never returned"
    finally:
        release.set()
        leader.join(30)
    keys = sorted(o.trigger_key for o in store.list_occurrences(job_id="j").items)
    assert keys == ["from-the-child", "from-the-parent"]
