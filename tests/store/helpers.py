"""Plain helpers shared by the conformance tests (no fixtures, nothing backend-specific)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import jobledger
from jobledger import Event, Occurrence, SchedulerError, Store
from jobledger.store.group_commit import GroupCommit
from jobledger.store.tx import Tx

LEASE_MS = 1_000


@contextmanager
def raises_code(code: str) -> Iterator[Any]:
    """Like ``pytest.raises(SchedulerError)``, and the error must carry ``code``."""
    with pytest.raises(SchedulerError) as info:
        yield info
    assert info.value.code == code, f"expected {code}, got {info.value.code}: {info.value}"


def make_job(store: Store, authority: dict, job_id: str = "job-a", **options: Any):
    options.setdefault("kind", "email")
    return store.create_job(id=job_id, authority=authority, **options)


def enqueue(store: Store, job_id: str, scheduled_for: int, trigger_key: str = "t", **options: Any):
    return store.enqueue_occurrence(
        job_id=job_id, scheduled_for=scheduled_for, trigger_key=trigger_key, **options
    )


def claim(store: Store, owner: str = "w1", lease_ms: int = LEASE_MS, **filters: Any) -> Occurrence:
    claimed = store.claim_next(owner_id=owner, lease_ms=lease_ms, **filters)
    assert claimed is not None, "expected a claimable occurrence"
    return claimed


def fail(store: Store, occurrence: Occurrence, **options: Any) -> Occurrence:
    assert occurrence.lease_owner is not None
    return store.settle(
        occurrence_id=occurrence.id,
        owner_id=occurrence.lease_owner,
        fence=occurrence.fence,
        outcome="failed",
        **options,
    )


def succeed(store: Store, occurrence: Occurrence, result: Any = None) -> Occurrence:
    assert occurrence.lease_owner is not None
    return store.settle(
        occurrence_id=occurrence.id,
        owner_id=occurrence.lease_owner,
        fence=occurrence.fence,
        outcome="succeeded",
        result=result,
    )


def types(events: list[Event]) -> list[str]:
    return [event.type for event in events]


def dead_letter(store: Store, authority: dict, job_id: str, clock, **job_options: Any):
    """A job whose single occurrence was dead-lettered by a non-retryable failure."""
    make_job(store, authority, job_id, **job_options)
    occurrence = enqueue(store, job_id, clock())
    running = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w1", lease_ms=LEASE_MS)
    assert running is not None
    return fail(store, running, retryable=False, error={"code": "boom", "message": "no"})


# -- group commit: deterministic groups (a held leader, callers queued behind it) ----------


class Writes:
    """The store's write transactions, counted."""

    def __init__(self, store: jobledger.Store) -> None:
        self.store = store
        self.count = 0

    def __call__(self, body: Callable[[Tx], object]) -> object:
        self.count += 1
        return self.store._write(body)  # type: ignore[attr-defined]


def grouped(store: jobledger.Store) -> tuple[GroupCommit[Any], Writes]:
    writes = Writes(store)
    group: GroupCommit[Any] = GroupCommit(writes)
    store.__dict__["_enqueue_group"] = group  # the store's own, with its writes counted
    return group, writes


def hold_leader(group: GroupCommit[Any]) -> tuple[threading.Thread, threading.Event]:
    release = threading.Event()
    holding = threading.Event()

    def body(tx: Tx) -> tuple[list[object], bool]:
        holding.set()
        assert release.wait(30)
        return [], False

    leader = threading.Thread(target=group.run, args=(body,))
    leader.start()
    assert holding.wait(30)
    return leader, release


def call_all(calls: list[Callable[[], object]]) -> list[object]:
    outcomes: list[object] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            outcomes[index] = calls[index]()
        except BaseException as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return [threads, outcomes]  # type: ignore[list-item]


def wait_queued(group: GroupCommit[Any], n: int) -> None:
    deadline = time.monotonic() + 30
    while len(group._queued) < n:
        assert time.monotonic() < deadline, "the callers never queued"
        time.sleep(0.005)
