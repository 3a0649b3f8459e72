"""Operator requeue of dead letters: exactly one more attempt, fenced, audited (§5; base.py)."""

from __future__ import annotations

import pytest

from .helpers import claim, dead_letter, enqueue, fail, make_job, raises_code, succeed, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"
EVIDENCE = "SCHEDULER_REQUEUE_EVIDENCE_CONFLICT"


def test_requeue_grants_exactly_one_more_attempt(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock, max_attempts=3)
    assert (dead.status, dead.attempt, dead.fence, dead.max_attempts) == ("dead_letter", 1, 1, 3)
    clock.advance(100)
    requeued = store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=1, reason="fixed the mail relay", actor="ops:alice"
    )
    assert requeued.status == "retry_wait"
    assert requeued.available_at == clock()
    assert requeued.settled_at is None
    assert requeued.updated_at == clock()
    assert (requeued.attempt, requeued.fence) == (1, 1)
    assert requeued.max_attempts == 2  # attempt + 1
    assert requeued.last_error == {"code": "boom", "message": "no"}
    assert requeued.lease_owner is None
    assert store.get_occurrence(dead.id) == requeued
    assert store.list_dead_letters() == []
    event = store.history(occurrence_id=dead.id)[0]
    assert event.type == "occurrence_requeued"
    assert event.owner_id is None
    assert event.fence == 1
    assert event.occurred_at == clock()
    assert set(event.data) == {
        "actor",
        "reason",
        "requeueId",
        "attempt",
        "previousMaxAttempts",
        "maxAttempts",
    }
    assert event.data["actor"] == "ops:alice"
    assert event.data["reason"] == "fixed the mail relay"
    assert type(event.data["requeueId"]) is int
    assert event.data["requeueId"] >= 1
    assert event.data["attempt"] == 1
    assert event.data["previousMaxAttempts"] == 3
    assert event.data["maxAttempts"] == 2

    again = claim(store, "w2")
    assert again.id == dead.id
    assert (again.attempt, again.fence, again.max_attempts) == (2, 2, 2)
    claimed_event = store.history(occurrence_id=dead.id)[0]
    assert claimed_event.type == "occurrence_claimed"
    assert claimed_event.data == {
        "attempt": 2,
        "previousOwner": None,
        "previousStatus": "retry_wait",
    }
    # That was the one extra attempt: a retryable failure dead-letters again.
    final = fail(store, again, error={"code": "still_broken"})
    assert final.status == "dead_letter"
    assert final.last_error == {"code": "still_broken"}
    assert store.claim_next(owner_id="w3", lease_ms=1_000) is None
    assert types(store.history(occurrence_id=dead.id)) == [
        "occurrence_dead_lettered",
        "occurrence_claimed",
        "occurrence_requeued",
        "occurrence_dead_lettered",
        "occurrence_claimed",
        "occurrence_enqueued",
    ]


def test_requeued_occurrence_can_succeed(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=1, reason="r", actor="a")
    settled = succeed(store, claim(store), result="done")
    assert settled.status == "succeeded"
    assert settled.last_error is None
    assert settled.result == "done"


def test_requeue_of_an_exhausted_dead_letter(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=2)
    occurrence = enqueue(store, "job-a", clock(), "t")
    fail(store, claim(store, "w1"))
    dead = fail(store, claim(store, "w2"))
    assert (dead.status, dead.attempt, dead.fence) == ("dead_letter", 2, 2)
    with raises_code(EVIDENCE) as info:
        store.requeue_dead_letter(
            occurrence_id=occurrence.id, expected_fence=1, reason="r", actor="a"
        )
    assert info.value.details == {"status": "dead_letter", "expectedFence": 1, "actualFence": 2}
    requeued = store.requeue_dead_letter(
        occurrence_id=occurrence.id, expected_fence=2, reason="r", actor="a"
    )
    assert (requeued.attempt, requeued.max_attempts) == (2, 3)
    assert store.history(occurrence_id=occurrence.id)[0].data["previousMaxAttempts"] == 2
    assert claim(store, "w3").attempt == 3


def test_requeue_of_a_lease_expired_dead_letter(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=10)
    clock.advance(10)
    assert store.claim_next(owner_id="w2", lease_ms=10) is None
    requeued = store.requeue_dead_letter(
        occurrence_id=occurrence.id, expected_fence=1, reason="worker died", actor="ops"
    )
    assert requeued.last_error["code"] == "lease_expired"
    assert claim(store, "w2").attempt == 2


def test_requeue_twice_needs_a_new_dead_letter(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    first = store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=1, reason="r", actor="a"
    )
    with raises_code(EVIDENCE) as info:
        store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=1, reason="r", actor="a")
    assert info.value.details == {"status": "retry_wait", "expectedFence": 1, "actualFence": 1}
    assert store.get_occurrence(dead.id) == first
    fail(store, claim(store, "w2"))
    store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=2, reason="r2", actor="b")
    requeues = [e for e in store.history(occurrence_id=dead.id) if e.type == "occurrence_requeued"]
    assert [e.data["actor"] for e in requeues] == ["b", "a"]
    assert requeues[0].data["requeueId"] > requeues[1].data["requeueId"]
    assert requeues[0].fence == 2


@pytest.mark.parametrize("state", ["queued", "running", "retry_wait", "succeeded"])
def test_requeue_refuses_non_dead_letters(store, clock, authority, state):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    fence = 0
    if state != "queued":
        running = claim(store)
        fence = running.fence
        if state == "retry_wait":
            fail(store, running)
        elif state == "succeeded":
            succeed(store, running)
    before = store.get_occurrence(occurrence.id)
    assert before.status == state
    with raises_code(EVIDENCE) as info:
        store.requeue_dead_letter(
            occurrence_id=occurrence.id, expected_fence=max(fence, 1), reason="r", actor="a"
        )
    assert info.value.details == {
        "status": state,
        "expectedFence": max(fence, 1),
        "actualFence": fence,
    }
    assert store.get_occurrence(occurrence.id) == before
    assert "occurrence_requeued" not in types(store.history(occurrence_id=occurrence.id))


def test_requeue_wrong_fence_changes_nothing(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    with raises_code(EVIDENCE) as info:
        store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=2, reason="r", actor="a")
    assert info.value.details == {"status": "dead_letter", "expectedFence": 2, "actualFence": 1}
    assert store.get_occurrence(dead.id) == dead


def test_requeue_missing_is_not_found(store):
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.requeue_dead_letter(
            occurrence_id="occ_missing", expected_fence=1, reason="r", actor="a"
        )


def test_requeue_attempt_limit_at_32(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=32)
    occurrence = enqueue(store, "job-a", clock(), "t")
    for _ in range(30):
        assert fail(store, claim(store)).status == "retry_wait"
    # At 31 attempts a requeue may still grant the 32nd.
    dead31 = fail(store, claim(store), retryable=False)
    assert (dead31.attempt, dead31.status) == (31, "dead_letter")
    requeued = store.requeue_dead_letter(
        occurrence_id=occurrence.id, expected_fence=31, reason="r", actor="a"
    )
    assert requeued.max_attempts == 32
    dead32 = fail(store, claim(store))
    assert (dead32.attempt, dead32.fence, dead32.status) == (32, 32, "dead_letter")
    with raises_code("SCHEDULER_REQUEUE_ATTEMPT_LIMIT") as info:
        store.requeue_dead_letter(
            occurrence_id=occurrence.id, expected_fence=32, reason="r", actor="a"
        )
    assert info.value.details == {"attempt": 32, "maxAttempts": 32}
    assert store.get_occurrence(occurrence.id) == dead32


def test_requeue_bumps_the_work_signal(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    before = store.work_signal.generation
    store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=1, reason="r", actor="a")
    assert store.work_signal.generation > before


BAD_REQUEUE = [
    ("occurrence_id", ""),
    ("occurrence_id", None),
    ("expected_fence", 0),
    ("expected_fence", -1),
    ("expected_fence", True),
    ("expected_fence", "1"),
    ("expected_fence", 1.5),
    ("reason", ""),
    ("reason", "   "),
    ("reason", "line\nbreak"),
    ("reason", "r" * 2001),
    ("reason", None),
    ("actor", ""),
    ("actor", "a" * 257),
    ("actor", "a\x00"),
    ("actor", None),
]


@pytest.mark.parametrize(("field", "value"), BAD_REQUEUE)
def test_requeue_rejects_invalid_arguments(store, clock, authority, field, value):
    dead = dead_letter(store, authority, "job-a", clock)
    arguments = {"occurrence_id": dead.id, "expected_fence": 1, "reason": "r", "actor": "a"}
    arguments[field] = value
    with raises_code(INVALID):
        store.requeue_dead_letter(**arguments)
    assert store.get_occurrence(dead.id) == dead


def test_requeue_accepts_long_reasons_and_trims(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=1.0, reason="  " + "r" * 2000 + " ", actor=" a "
    )
    data = store.history(occurrence_id=dead.id)[0].data
    assert data["reason"] == "r" * 2000
    assert data["actor"] == "a"


def test_a_requeued_dead_letter_of_a_disabled_job_waits_for_the_job(store, clock, authority):
    """Disabling a job changes only its live occurrences; a dead letter requeued afterwards is
    live again, and must not be claimable while its job is disabled."""
    dead = dead_letter(store, authority, "job-d", clock)
    job = store.get_job("job-d")
    job = store.update_job("job-d", expected_revision=job.revision, patch={"enabled": False})
    store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=dead.fence, reason="retry it", actor="ops"
    )
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    store.update_job("job-d", expected_revision=job.revision, patch={"enabled": True})
    assert claim(store).id == dead.id
