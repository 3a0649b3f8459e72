"""release_lease: a worker shutting down hands an unfinished attempt back."""

from __future__ import annotations

import pytest

from tests.store.helpers import LEASE_MS, claim, enqueue, make_job, raises_code


@pytest.fixture
def claimed(store, clock, authority):
    make_job(store, authority, max_attempts=2)
    enqueue(store, "job-a", clock())
    return claim(store, owner="w1")


def test_release_hands_the_attempt_back_and_makes_it_claimable_now(store, clock, claimed):
    clock.advance(10)
    released = store.release_lease(
        occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, reason="worker_shutdown"
    )
    assert released.status == "retry_wait"
    assert released.attempt == 0
    assert released.fence == claimed.fence
    assert released.lease_owner is None
    assert released.lease_expires_at is None
    assert released.available_at == clock()
    assert released.settled_at is None

    again = claim(store, owner="w2")
    assert again.id == claimed.id
    assert again.attempt == 1
    assert again.fence == claimed.fence + 1


def test_release_records_who_and_why(store, clock, claimed):
    store.release_lease(
        occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, reason="worker_shutdown"
    )
    event = store.history(occurrence_id=claimed.id, limit=1)[0]
    assert event.type == "occurrence_released"
    assert event.owner_id == "w1"
    assert event.fence == claimed.fence
    assert event.data == {"attempt": 0, "reason": "worker_shutdown"}


def test_release_on_the_final_attempt_does_not_dead_letter(store, clock, authority):
    make_job(store, authority, job_id="once", max_attempts=1)
    occurrence = enqueue(store, "once", clock())
    first = claim(store, owner="w1")
    assert first.id == occurrence.id
    store.release_lease(occurrence_id=first.id, owner_id="w1", fence=first.fence, reason="stop")
    second = claim(store, owner="w2")
    assert second.attempt == 1
    assert second.max_attempts == 1


@pytest.mark.parametrize(
    ("owner", "fence_delta"),
    [("intruder", 0), ("w1", 1), ("w1", -1)],
)
def test_release_needs_the_current_owner_and_fence(store, claimed, owner, fence_delta):
    fence = claimed.fence + fence_delta
    if fence < 1:
        with raises_code("SCHEDULER_INVALID_ARGUMENT"):
            store.release_lease(occurrence_id=claimed.id, owner_id=owner, fence=fence, reason="x")
        return
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.release_lease(occurrence_id=claimed.id, owner_id=owner, fence=fence, reason="x")
    assert store.get_occurrence(claimed.id).status == "running"


def test_release_after_expiry_is_refused(store, clock, claimed):
    clock.advance(LEASE_MS)  # expiry equal to now already counts as expired
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.release_lease(
            occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, reason="late"
        )
    current = store.get_occurrence(claimed.id)
    assert current.status == "running"
    assert current.attempt == 1


def test_release_of_a_settled_occurrence_is_refused(store, claimed):
    store.settle(occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, outcome="succeeded")
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.release_lease(
            occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, reason="late"
        )
    assert store.get_occurrence(claimed.id).status == "succeeded"


@pytest.mark.parametrize(
    ("field", "value"),
    [("reason", ""), ("reason", "x" * 129), ("owner_id", " "), ("fence", 0), ("fence", True)],
)
def test_release_validates_arguments(store, claimed, field, value):
    arguments = {
        "occurrence_id": claimed.id,
        "owner_id": "w1",
        "fence": claimed.fence,
        "reason": "stop",
    }
    arguments[field] = value
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.release_lease(**arguments)
    assert store.get_occurrence(claimed.id).status == "running"


def test_release_wakes_the_work_signal(store, claimed):
    before = store.work_signal.generation
    store.release_lease(occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, reason="x")
    assert store.work_signal.generation > before
