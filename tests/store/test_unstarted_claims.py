"""A crash never spends, dead-letters or adjudicates a claim whose handler never began (issue 30,
items 1 and 5).

A claim held ahead of a free slot (``claim_batch(start=…)`` leaves it unmarked) has
``started_at`` NULL until :meth:`Store.start_batch` (or ``settle_batch(starts=…)``) marks it,
fenced, before its handler runs. Every path that ends a lost lease — the claim's sweep of
expired leases (final attempts, outcome-unknown ones), the targeted claim's sweep, the reaper of
a dead owner — gives a never-started claim back (``retry_wait``, its attempt not spent, no
backoff, ``occurrence_released`` with ``started: false``) and judges only started ones as lost.
Before, every claim spent an attempt: a ``max_attempts=1`` occurrence claimed ahead was a
``lease_expired`` dead letter after a crash, and under ``on_lost_lease="adjudicate"`` an
outcome-unknown case, though its handler never began.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger import Renewal, Settlement
from jobledger.testing import FakeClock

from .helpers import enqueue, make_job, raises_code, types

LEASE_MS = 10_000
EXPIRED = timedelta(milliseconds=LEASE_MS + 1)


def _ahead(store: jobledger.Store, n: int, *, start: int, owner: str = "w1"):
    claimed = store.claim_batch(owner_id=owner, lease_ms=LEASE_MS, limit=n, start=start)
    assert len(claimed) == n
    return claimed


def _status(store: jobledger.Store, occurrence: jobledger.Occurrence) -> tuple[str, int]:
    current = store.get_occurrence(occurrence.id)
    assert current is not None
    return current.status, current.attempt


@pytest.fixture(params=["retry", "adjudicate"])
def final_job(request, store, authority, clock):
    """Three occurrences of a ``max_attempts=1`` job (the policy for a lost lease: ``retry`` or
    ``adjudicate``)."""
    make_job(store, authority, "once", max_attempts=1, on_lost_lease=request.param)
    return [enqueue(store, "once", clock(), f"t-{n}") for n in range(3)]


def test_a_claim_marks_started_only_the_claims_that_start_at_once(store, final_job):
    first, *ahead = _ahead(store, 3, start=1)
    assert first.started_at is not None
    assert [o.started_at for o in ahead] == [None, None]
    # Without start= every claim starts at once (a runtime's run_next, direct store callers).
    assert all(store.get_occurrence(o.id).started_at is None for o in ahead)


def test_an_expired_claim_that_never_started_is_given_back_not_dead_lettered(
    store, final_job, clock
):
    started, ahead, _ = _ahead(store, 3, start=1)
    clock.advance(EXPIRED)
    # The sweep of the next claim (of another kind: it takes nothing) judges the expired leases.
    assert store.claim_next(owner_id="w2", lease_ms=LEASE_MS, job_kind="other") is None
    error = store.get_occurrence(started.id).last_error
    assert _status(store, started) == ("dead_letter", 1)
    assert error["code"] in ("lease_expired", "SCHEDULER_OUTCOME_UNKNOWN")
    for occurrence in (ahead, _):
        assert _status(store, occurrence) == ("retry_wait", 0)
        released = store.events(occurrence_id=occurrence.id, event_type="occurrence_released")
        assert [(e.owner_id, e.fence, e.data) for e in released] == [
            ("w1", occurrence.fence, {"attempt": 0, "reason": "lease_expired", "started": False})
        ]
    # Only the started attempt is lost: a case of its own under "adjudicate", none else.
    adjudicated = started.on_lost_lease == "adjudicate"
    cases = [case.occurrence_id for case in store.adjudication_cases()]
    assert cases == ([started.id] if adjudicated else [])
    assert [o.id for o in store.list_dead_letters()] == [started.id]
    # Given back, not spent: claimable at once (no backoff), and its handler may run.
    again = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=5)
    assert {o.id for o in again} == {ahead.id, _.id}
    assert {(o.attempt, o.max_attempts) for o in again} == {(1, 1)}


def test_a_claim_given_back_by_the_sweep_is_claimed_in_the_same_transaction(
    store, final_job, clock
):
    _, ahead, last = _ahead(store, 3, start=1)
    clock.advance(EXPIRED)
    retaken = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=5)
    assert {o.id for o in retaken} == {ahead.id, last.id}
    trail = types(sorted(store.events(occurrence_id=ahead.id), key=lambda e: e.event_id))
    assert trail[-2:] == ["occurrence_released", "occurrence_claimed"]


def test_a_claim_marked_started_before_it_expired_is_lost_as_before(store, final_job, clock):
    _, ahead, unmarked = _ahead(store, 3, start=1)
    [marked] = store.start_batch([Renewal(ahead.id, "w1", ahead.fence, LEASE_MS)])
    assert isinstance(marked, jobledger.Occurrence) and marked.started_at == clock()
    clock.advance(EXPIRED)
    assert store.claim_next(owner_id="w2", lease_ms=LEASE_MS, job_kind="other") is None
    assert _status(store, ahead)[0] == "dead_letter"
    assert _status(store, unmarked) == ("retry_wait", 0)
    if marked.on_lost_lease == "adjudicate":
        [case] = [c for c in store.adjudication_cases() if c.occurrence_id == ahead.id]
        assert case.started_at == marked.started_at


def test_a_targeted_claim_gives_back_an_expired_never_started_claim_and_takes_it(
    store, final_job, clock
):
    _, ahead, _ = _ahead(store, 3, start=1)
    clock.advance(EXPIRED)
    taken = store.claim_occurrence(occurrence_id=ahead.id, owner_id="w2", lease_ms=LEASE_MS)
    assert taken is not None and (taken.attempt, taken.lease_owner) == (1, "w2")
    assert taken.started_at is not None  # a targeted claim starts at once


def test_the_reaper_gives_back_a_dead_owners_never_started_claims_at_once(store, final_job, clock):
    started, ahead, last = _ahead(store, 3, start=1)
    ended = store.expire_leases_of("w1", reason="owner_gone")
    assert {o.id: o.status for o in ended} == {
        ahead.id: "retry_wait",
        last.id: "retry_wait",
        started.id: "running",
    }
    for occurrence in (ahead, last):
        assert _status(store, occurrence) == ("retry_wait", 0)
        [released] = store.events(occurrence_id=occurrence.id, event_type="occurrence_released")
        assert released.data == {"attempt": 0, "reason": "owner_gone", "started": False}
    [expired] = store.events(occurrence_id=started.id, event_type="occurrence_lease_expired")
    assert expired.data == {"reason": "owner_gone"}
    # Before its lease would have expired, the given-back claims run elsewhere; the started
    # one (final attempt) is dead-lettered by that claim's sweep.
    again = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=5)
    assert {o.id for o in again} == {ahead.id, last.id}
    assert _status(store, started)[0] == "dead_letter"


def test_a_retrying_job_gets_its_attempt_back_too(store, authority, clock):
    make_job(store, authority, "thrice", max_attempts=3)
    enqueue(store, "thrice", clock(), "t")
    [ahead] = _ahead(store, 1, start=0)
    clock.advance(EXPIRED)
    [again] = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=1, start=0)
    assert (again.id, again.attempt, again.reclaimed) == (ahead.id, 1, False)
    assert store.get_occurrence(ahead.id).available_at <= clock()  # no backoff


def test_a_live_owners_expired_claim_is_left_to_it_on_sqlite(
    backend, store, store_factory, final_job, clock, tmp_path
):
    if backend != "sqlite":
        pytest.skip("the owner-lock path of a clock step forward is SQLite's")
    _, ahead, _ = _ahead(store, 3, start=1)
    lock = store.hold_owner_lock("w1")
    try:
        clock.advance(EXPIRED)
        assert store.claim_next(owner_id="w2", lease_ms=LEASE_MS, job_kind="other") is None
        assert _status(store, ahead) == ("running", 1)
        [marked] = store.start_batch([Renewal(ahead.id, "w1", ahead.fence, LEASE_MS)])
        assert isinstance(marked, jobledger.Occurrence) and marked.started_at == clock()
    finally:
        lock.close()


def test_a_mark_is_fenced_and_a_lost_lease_marks_nothing(store, final_job, clock):
    _, ahead, _ = _ahead(store, 3, start=1)
    clock.advance(EXPIRED)
    [lost] = store.start_batch([Renewal(ahead.id, "w1", ahead.fence, LEASE_MS)])
    assert isinstance(lost, jobledger.LeaseLost)
    assert store.get_occurrence(ahead.id).started_at is None
    assert store.events(occurrence_id=ahead.id, event_type="occurrence_started") == []


def test_a_settle_batch_marks_the_next_claim_in_its_own_transaction(store, final_job, clock):
    running, ahead, _ = _ahead(store, 3, start=1)
    clock.advance(timedelta(seconds=1))
    settled, marked = store.settle_batch(
        [Settlement(running.id, "w1", running.fence, "succeeded", result=1)],
        starts=[Renewal(ahead.id, "w1", ahead.fence, LEASE_MS)],
    )
    assert isinstance(settled, jobledger.Occurrence) and settled.status == "succeeded"
    assert isinstance(marked, jobledger.Occurrence)
    assert marked.started_at == clock() and marked.lease_expires_at == clock() + LEASE_MS
    [event] = store.events(occurrence_id=ahead.id, event_type="occurrence_started")
    assert (event.owner_id, event.fence, event.data) == (
        "w1",
        ahead.fence,
        {"attempt": 1, "leaseExpiresAt": clock() + LEASE_MS},
    )
    # The first mark stands.
    clock.advance(timedelta(seconds=1))
    [again] = store.start_batch([Renewal(ahead.id, "w1", ahead.fence, LEASE_MS)])
    assert isinstance(again, jobledger.Occurrence) and again.started_at == marked.started_at


def test_bad_starts_are_refused_and_change_nothing(store, final_job):
    running, ahead, _ = _ahead(store, 3, start=1)
    settle = Settlement(running.id, "w1", running.fence, "succeeded")
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.settle_batch([settle], starts=[Renewal(running.id, "w1", running.fence, LEASE_MS)])
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.settle_batch([settle], starts="nope")  # type: ignore[arg-type]
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.start_batch([Renewal(ahead.id, "w1", ahead.fence, 0)])
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=2, start=3)
    assert _status(store, running) == ("running", 1)
    assert store.get_occurrence(ahead.id).started_at is None


def test_a_release_clears_the_mark(store, final_job, clock):
    running, _, _ = _ahead(store, 3, start=1)
    released = store.release_lease(
        occurrence_id=running.id, owner_id="w1", fence=running.fence, reason="worker_shutdown"
    )
    assert (released.status, released.attempt, released.started_at) == ("retry_wait", 0, None)


def test_a_reclaimed_started_lease_is_a_new_attempt(store, authority, clock: FakeClock):
    make_job(store, authority, "thrice", max_attempts=3)
    enqueue(store, "thrice", clock(), "t")
    [first] = _ahead(store, 1, start=1)
    clock.advance(EXPIRED)
    [again] = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=1, start=0)
    assert (again.id, again.attempt, again.reclaimed, again.started_at) == (
        first.id,
        2,
        True,
        None,
    )
