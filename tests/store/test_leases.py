"""Leases: renew, settle, fencing and expiry (§2.7 rows 5–8, §3.5 renew/settle)."""

from __future__ import annotations

import pytest

from .helpers import claim, enqueue, fail, make_job, raises_code, succeed, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"
LOST = "SCHEDULER_LEASE_LOST"


@pytest.fixture
def running(store, clock, authority):
    """One job (max_attempts 2) and its occurrence, claimed by w1 with a 1 s lease."""
    make_job(store, authority, "job-a", max_attempts=2)
    enqueue(store, "job-a", clock(), "t")
    return claim(store, "w1", lease_ms=1_000)


# -- renew ------------------------------------------------------------------------------------


def test_renew_extends_the_lease_and_records_it(store, clock, running):
    clock.advance(400)
    renewed = store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=2_000)
    assert renewed.lease_expires_at == clock() + 2_000
    assert renewed.updated_at == clock()
    assert (renewed.status, renewed.attempt, renewed.fence, renewed.lease_owner) == (
        "running",
        1,
        1,
        "w1",
    )
    assert store.get_occurrence(running.id) == renewed
    event = store.history(occurrence_id=running.id)[0]
    assert event.type == "occurrence_renewed"
    assert (event.owner_id, event.fence, event.occurred_at) == ("w1", 1, clock())
    assert event.data == {"leaseExpiresAt": clock() + 2_000}


def test_renew_never_shortens_a_lease(store, clock, running):
    original = running.lease_expires_at
    clock.advance(100)
    renewed = store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=10)
    assert renewed.lease_expires_at == original
    assert store.history(occurrence_id=running.id)[0].data == {"leaseExpiresAt": original}


def test_renew_by_another_owner_is_lease_lost(store, running):
    with raises_code(LOST) as info:
        store.renew(occurrence_id=running.id, owner_id="w2", fence=1, lease_ms=1_000)
    assert running.id in info.value.message
    assert store.get_occurrence(running.id) == running


def test_renew_with_wrong_fence_is_lease_lost(store, running):
    with raises_code(LOST):
        store.renew(occurrence_id=running.id, owner_id="w1", fence=2, lease_ms=1_000)
    assert types(store.history(occurrence_id=running.id))[0] == "occurrence_claimed"


def test_renew_at_expiry_is_lease_lost(store, clock, running):
    clock.set(running.lease_expires_at)  # equal to now counts as expired
    with raises_code(LOST):
        store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=1_000)
    assert store.get_occurrence(running.id).lease_expires_at == running.lease_expires_at


def test_renew_one_ms_before_expiry_succeeds(store, clock, running):
    clock.set(running.lease_expires_at - 1)
    renewed = store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=1_000)
    assert renewed.lease_expires_at == clock() + 1_000


def test_renew_of_missing_or_unclaimed_occurrence_is_lease_lost(store, clock, authority):
    with raises_code(LOST):
        store.renew(occurrence_id="occ_missing", owner_id="w1", fence=1, lease_ms=1_000)
    make_job(store, authority, "job-q")
    queued = enqueue(store, "job-q", clock() + 10_000, "t")
    with raises_code(LOST):
        store.renew(occurrence_id=queued.id, owner_id="w1", fence=1, lease_ms=1_000)


def test_renew_after_settle_is_lease_lost(store, running):
    succeed(store, running)
    with raises_code(LOST):
        store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=1_000)


def test_renew_by_an_owner_fenced_out_by_a_reclaim(store, clock, running):
    clock.advance(1_000)
    second = claim(store, "w2", lease_ms=1_000)
    assert second.fence == 2
    with raises_code(LOST):
        store.renew(occurrence_id=running.id, owner_id="w1", fence=1, lease_ms=1_000)
    with raises_code(LOST):  # the right fence does not help the wrong owner
        store.renew(occurrence_id=running.id, owner_id="w1", fence=2, lease_ms=1_000)
    assert store.renew(occurrence_id=running.id, owner_id="w2", fence=2, lease_ms=5).fence == 2


BAD_RENEW = [
    ("occurrence_id", ""),
    ("owner_id", ""),
    ("owner_id", None),
    ("fence", 0),
    ("fence", -1),
    ("fence", True),
    ("fence", "1"),
    ("fence", 1.5),
    ("lease_ms", 0),
    ("lease_ms", 86_400_001),
    ("lease_ms", True),
]


@pytest.mark.parametrize(("field", "value"), BAD_RENEW)
def test_renew_rejects_invalid_arguments(store, running, field, value):
    arguments = {"occurrence_id": running.id, "owner_id": "w1", "fence": 1, "lease_ms": 1_000}
    arguments[field] = value
    with raises_code(INVALID):
        store.renew(**arguments)
    assert store.get_occurrence(running.id) == running


# -- settle -------------------------------------------------------------------------------------


def test_settle_succeeded(store, clock, running):
    clock.advance(10)
    settled = succeed(store, running, result={"sent": 3})
    assert settled.status == "succeeded"
    assert settled.result == {"sent": 3}
    assert settled.last_error is None
    assert settled.settled_at == settled.updated_at == clock()
    assert settled.lease_owner is None
    assert settled.lease_expires_at is None
    assert (settled.attempt, settled.fence) == (1, 1)
    assert settled.available_at == running.available_at
    assert store.get_occurrence(running.id) == settled
    event = store.history(occurrence_id=running.id)[0]
    assert event.type == "occurrence_succeeded"
    assert (event.owner_id, event.fence, event.occurred_at) == ("w1", 1, clock())
    assert event.data == {"attempt": 1, "maxAttempts": 2}


def test_settle_succeeded_default_result_is_null(store, running):
    assert succeed(store, running).result is None


def test_succeeded_clears_the_previous_error(store, clock, running):
    failed = fail(store, running, error={"code": "e1", "message": "first"})
    assert failed.last_error == {"code": "e1", "message": "first"}
    again = claim(store, "w2")
    assert again.last_error == {"code": "e1", "message": "first"}  # kept while running
    settled = succeed(store, again, result=1)
    assert settled.last_error is None
    assert settled.result == 1


def test_settle_failed_retryable_goes_to_retry_wait(store, clock, running):
    clock.advance(10)
    settled = fail(store, running, error={"code": "timeout", "message": "slow"})
    assert settled.status == "retry_wait"
    assert settled.available_at == clock()
    assert settled.last_error == {"code": "timeout", "message": "slow"}
    assert settled.result is None
    assert settled.settled_at is None
    assert settled.lease_owner is None
    assert settled.lease_expires_at is None
    assert (settled.attempt, settled.fence) == (1, 1)
    event = store.history(occurrence_id=running.id)[0]
    assert event.type == "occurrence_retry_scheduled"
    assert (event.owner_id, event.fence) == ("w1", 1)
    assert event.data == {"attempt": 1, "maxAttempts": 2, "retryAt": clock()}


def test_settle_failed_default_error(store, running):
    settled = fail(store, running)
    assert settled.last_error == {"code": "execution_failed", "message": "Execution failed"}


def test_retry_at_in_the_future_delays_the_next_claim(store, clock, running):
    retry_at = clock() + 5_000
    settled = fail(store, running, retry_at=retry_at)
    assert settled.available_at == retry_at
    assert store.history(occurrence_id=running.id)[0].data["retryAt"] == retry_at
    clock.advance(4_999)
    assert store.claim_next(owner_id="w2", lease_ms=1_000) is None
    assert store.claim_occurrence(occurrence_id=running.id, owner_id="w2", lease_ms=9) is None
    clock.advance(1)
    again = claim(store, "w2")
    assert (again.id, again.attempt, again.fence) == (running.id, 2, 2)


def test_retry_at_in_the_past_is_floored_at_now(store, clock, running):
    clock.advance(500)
    settled = fail(store, running, retry_at=clock() - 400)
    assert settled.available_at == clock()
    assert store.history(occurrence_id=running.id)[0].data["retryAt"] == clock()


def test_exhausted_attempts_dead_letter(store, clock, running):
    fail(store, running, error={"code": "e1"})
    clock.advance(5)
    second = claim(store, "w2")
    assert second.attempt == 2
    clock.advance(5)
    settled = fail(store, second, error={"code": "e2"}, retry_at=clock() + 100)
    assert settled.status == "dead_letter"
    assert settled.settled_at == clock()
    assert settled.last_error == {"code": "e2"}
    assert settled.available_at == second.available_at  # unchanged for terminal outcomes
    assert settled.lease_owner is None
    event = store.history(occurrence_id=running.id)[0]
    assert event.type == "occurrence_dead_lettered"
    assert (event.owner_id, event.fence) == ("w2", 2)
    assert event.data == {"attempt": 2, "maxAttempts": 2}
    assert store.claim_next(owner_id="w3", lease_ms=1_000) is None


def test_non_retryable_failure_dead_letters_immediately(store, running):
    settled = fail(store, running, retryable=False)
    assert settled.status == "dead_letter"
    assert settled.attempt == 1
    assert settled.last_error == {"code": "execution_failed", "message": "Execution failed"}
    assert store.history(occurrence_id=running.id)[0].data == {"attempt": 1, "maxAttempts": 2}


def test_settle_is_fenced(store, clock, running):
    with raises_code(LOST):
        store.settle(occurrence_id=running.id, owner_id="w2", fence=1, outcome="succeeded")
    with raises_code(LOST):
        store.settle(occurrence_id=running.id, owner_id="w1", fence=2, outcome="failed")
    with raises_code(LOST):
        store.settle(occurrence_id="occ_missing", owner_id="w1", fence=1, outcome="succeeded")
    assert store.get_occurrence(running.id) == running
    assert types(store.history(occurrence_id=running.id)) == [
        "occurrence_claimed",
        "occurrence_enqueued",
    ]


def test_settle_at_expiry_is_lease_lost_and_changes_nothing(store, clock, running):
    clock.set(running.lease_expires_at)
    with raises_code(LOST):
        succeed(store, running)
    assert store.get_occurrence(running.id) == running
    with raises_code(LOST):
        fail(store, running)
    assert store.get_occurrence(running.id).status == "running"


def test_settle_twice_is_lease_lost(store, running):
    succeed(store, running)
    with raises_code(LOST):
        succeed(store, running)
    with raises_code(LOST):
        fail(store, running)


def test_stale_owner_cannot_settle_after_reclaim(store, clock, running):
    clock.advance(1_000)
    second = claim(store, "w2")
    with raises_code(LOST):
        succeed(store, running)
    settled = succeed(store, second, result="ok")
    assert (settled.status, settled.attempt, settled.fence) == ("succeeded", 2, 2)
    assert types(store.history(occurrence_id=running.id)) == [
        "occurrence_succeeded",
        "occurrence_reclaimed",
        "occurrence_claimed",
        "occurrence_enqueued",
    ]


def test_fence_is_monotonic_across_the_lifecycle(store, clock, authority):
    make_job(store, authority, "job-m", max_attempts=4)
    enqueue(store, "job-m", clock(), "t")
    fences = []
    current = claim(store, "w1", lease_ms=10)
    fences.append(current.fence)
    clock.advance(10)
    current = claim(store, "w2", lease_ms=10)  # reclaim
    fences.append(current.fence)
    fail(store, current)
    current = claim(store, "w3", lease_ms=10)
    fences.append(current.fence)
    assert fences == [1, 2, 3]
    assert current.attempt == 3


BAD_SETTLE = [
    ("occurrence_id", ""),
    ("owner_id", ""),
    ("fence", 0),
    ("fence", True),
    ("fence", "1"),
    ("outcome", "done"),
    ("outcome", None),
    ("outcome", "SUCCEEDED"),
    ("retryable", "yes"),
    ("retryable", 1),
    ("retryable", None),
]


@pytest.mark.parametrize(("field", "value"), BAD_SETTLE)
def test_settle_rejects_invalid_arguments(store, running, field, value):
    arguments = {
        "occurrence_id": running.id,
        "owner_id": "w1",
        "fence": 1,
        "outcome": "succeeded",
    }
    arguments[field] = value
    with raises_code(INVALID):
        store.settle(**arguments)
    assert store.get_occurrence(running.id) == running


@pytest.mark.parametrize(
    "extra",
    [
        {"outcome": "succeeded", "result": float("nan")},
        {"outcome": "succeeded", "result": {"a": object()}},
        {"outcome": "failed", "error": float("inf")},
        {"outcome": "failed", "error": {1: "x"}},
        {"outcome": "failed", "retry_at": -1},
        {"outcome": "failed", "retry_at": True},
        {"outcome": "failed", "retry_at": "soon"},
        {"outcome": "failed", "retry_at": 2**53},
    ],
)
def test_settle_rejects_invalid_result_error_and_retry_at(store, running, extra):
    with raises_code(INVALID):
        store.settle(occurrence_id=running.id, owner_id="w1", fence=1, **extra)
    assert store.get_occurrence(running.id) == running


def test_settle_validates_before_checking_the_lease(store):
    with raises_code(INVALID):
        store.settle(occurrence_id="occ_missing", owner_id="w1", fence=1, outcome="maybe")
