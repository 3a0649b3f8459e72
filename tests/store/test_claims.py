"""Claims: claim_next and claim_occurrence — eligibility, filters, order, events (§2.7 2–4, 9)."""

from __future__ import annotations

import pytest

from .helpers import claim, enqueue, fail, make_job, raises_code, succeed, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def test_claim_next_leases_a_queued_occurrence(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    clock.advance(7)
    claimed = store.claim_next(owner_id=" w1 ", lease_ms=1_500)
    assert claimed is not None
    assert claimed.id == occurrence.id
    assert claimed.status == "running"
    assert (claimed.attempt, claimed.fence) == (1, 1)
    assert claimed.lease_owner == "w1"
    assert claimed.lease_expires_at == clock() + 1_500
    assert claimed.updated_at == clock()
    assert claimed.settled_at is None
    assert store.get_occurrence(occurrence.id) == claimed
    event = store.history(occurrence_id=occurrence.id)[0]
    assert event.type == "occurrence_claimed"
    assert event.owner_id == "w1"
    assert event.fence == 1
    assert event.occurred_at == clock()
    assert event.data == {"attempt": 1, "previousOwner": None, "previousStatus": "queued"}


def test_claim_next_returns_none_when_nothing_is_due(store, clock, authority):
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock() + 100, "t")
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    clock.advance(99)
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    clock.advance(1)  # available_at == now is due
    assert claim(store).id == occurrence.id
    assert store.claim_next(owner_id="w2", lease_ms=1_000) is None  # live lease
    assert types(store.history(occurrence_id=occurrence.id)) == [
        "occurrence_claimed",
        "occurrence_enqueued",
    ]


def test_claim_next_honours_available_at_before_scheduled_for(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock() + 60_000, "t", available_at=clock())
    assert claim(store).id == occurrence.id


def test_claim_order_is_due_instant_then_scheduled_for_then_occurrence_id(store, clock, authority):
    make_job(store, authority, "job-a")
    now = clock()
    late_due = enqueue(store, "job-a", now - 10_000, "a", available_at=now - 10)
    early_due = enqueue(store, "job-a", now, "b", available_at=now - 20)
    # Same due instant: the earlier scheduled_for wins.
    tie_late_sched = enqueue(store, "job-a", now + 5, "c", available_at=now - 15)
    tie_early_sched = enqueue(store, "job-a", now + 1, "d", available_at=now - 15)
    # Same due instant and scheduled_for: the smaller occurrence id wins, as in the reference
    # (not the order of insertion: test_tie_order.py).
    twins = [enqueue(store, "job-a", now + 3, key, available_at=now - 12) for key in "efg"]
    twins.sort(key=lambda occurrence: occurrence.id)
    expected = [
        early_due.id,
        tie_early_sched.id,
        tie_late_sched.id,
        *(o.id for o in twins),
        late_due.id,
    ]
    got = [claim(store, f"w{index}").id for index in range(len(expected))]
    assert got == expected
    assert store.claim_next(owner_id="w", lease_ms=1_000) is None


def test_reclaim_is_ordered_by_its_lease_expiry(store, clock, authority):
    make_job(store, authority, "job-a")
    start = clock()
    stuck = enqueue(store, "job-a", start, "stuck")
    claim(store, "w1", lease_ms=500)  # available since start, but due again at start + 500
    waiting = enqueue(store, "job-a", start + 50_000, "waiting", available_at=start + 150)
    later = enqueue(store, "job-a", start - 60_000, "later", available_at=start + 700)
    clock.advance(800)
    # Due instants: waiting 150, stuck 500 (its lease expiry), later 700; scheduled_for and
    # the stuck row's available_at do not matter.
    assert claim(store, "w2").id == waiting.id
    reclaimed = claim(store, "w3")
    assert reclaimed.id == stuck.id
    assert reclaimed.attempt == 2
    assert claim(store, "w4").id == later.id


def test_reclaim_after_expiry_fences_out_the_old_owner(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    first = claim(store, "w1", lease_ms=1_000)
    clock.advance(999)
    assert store.claim_next(owner_id="w2", lease_ms=1_000) is None
    clock.advance(1)  # expiry == now counts as expired
    second = claim(store, "w2", lease_ms=2_000)
    assert second.id == occurrence.id
    assert (second.attempt, second.fence, second.lease_owner) == (2, 2, "w2")
    assert second.lease_expires_at == clock() + 2_000
    event = store.history(occurrence_id=occurrence.id)[0]
    assert event.type == "occurrence_reclaimed"
    assert (event.owner_id, event.fence) == ("w2", 2)
    assert event.data == {"attempt": 2, "previousOwner": "w1", "previousStatus": "running"}
    with raises_code("SCHEDULER_LEASE_LOST"):
        succeed(store, first)
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.renew(occurrence_id=occurrence.id, owner_id="w1", fence=1, lease_ms=1_000)


def test_claim_from_retry_wait(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t")
    retried = fail(store, claim(store, "w1"))
    assert retried.status == "retry_wait"
    again = claim(store, "w2")
    assert (again.attempt, again.fence) == (2, 2)
    event = store.history(occurrence_id=again.id)[0]
    assert event.type == "occurrence_claimed"
    assert event.data == {"attempt": 2, "previousOwner": None, "previousStatus": "retry_wait"}


def test_disabled_job_is_not_claimable(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    store.update_job("job-a", expected_revision=1, patch={"enabled": False})
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    assert (
        store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w1", lease_ms=1_000) is None
    )
    assert store.get_occurrence(occurrence.id).status == "queued"
    store.update_job("job-a", expected_revision=2, patch={"enabled": True})
    assert claim(store).id == occurrence.id


def test_disabled_job_blocks_reclaim(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t")
    running = claim(store, "w1", lease_ms=100)
    store.update_job("job-a", expected_revision=1, patch={"enabled": False})
    clock.advance(100)
    assert store.claim_next(owner_id="w2", lease_ms=1_000) is None
    assert store.get_occurrence(running.id).lease_owner == "w1"


def test_kind_filter_uses_the_job_kind_and_leaves_other_work(store, clock, authority):
    make_job(store, authority, "job-mail", kind="email")
    make_job(store, authority, "job-sms", kind="sms")
    mail = enqueue(store, "job-mail", clock() - 10, "t")  # more overdue
    sms = enqueue(store, "job-sms", clock(), "t")
    assert store.claim_next(owner_id="w1", lease_ms=1_000, job_kind="fax") is None
    got = claim(store, "w1", job_kind=" sms ")
    assert got.id == sms.id
    assert store.get_occurrence(mail.id).status == "queued"
    assert store.claim_next(owner_id="w1", lease_ms=1_000, job_kind="sms") is None
    # The job's *current* kind decides.
    store.update_job("job-mail", expected_revision=1, patch={"kind": "sms"})
    assert claim(store, "w2", job_kind="sms").id == mail.id


def test_workspace_filter_uses_the_job_authority(store, clock, authority):
    ws_a = {**authority, "workspaceId": "ws-a"}
    ws_b = {**authority, "workspaceId": "ws-b"}
    make_job(store, ws_a, "job-a")
    make_job(store, ws_b, "job-b")
    make_job(store, authority, "job-none")
    a = enqueue(store, "job-a", clock() - 10, "t")
    b = enqueue(store, "job-b", clock(), "t")
    none = enqueue(store, "job-none", clock() - 20, "t")
    assert store.claim_next(owner_id="w1", lease_ms=1_000, workspace_id="ws-z") is None
    assert claim(store, "w1", workspace_id="ws-b").id == b.id
    assert store.get_occurrence(a.id).status == "queued"
    assert store.get_occurrence(none.id).status == "queued"
    assert store.claim_next(owner_id="w1", lease_ms=1_000, workspace_id="ws-b") is None
    # Moving the job to another workspace moves its queued work, although the occurrence's own
    # authority snapshot still says ws-a.
    store.update_job("job-a", expected_revision=1, patch={"authority": ws_b})
    assert store.claim_next(owner_id="w1", lease_ms=1_000, workspace_id="ws-a") is None
    moved = claim(store, "w2", workspace_id="ws-b")
    assert moved.id == a.id
    assert moved.authority["workspaceId"] == "ws-a"


def test_kind_and_workspace_filters_combine(store, clock, authority):
    make_job(store, {**authority, "workspaceId": "ws"}, "job-a", kind="email")
    make_job(store, {**authority, "workspaceId": "ws"}, "job-b", kind="sms")
    make_job(store, {**authority, "workspaceId": "other"}, "job-c", kind="sms")
    enqueue(store, "job-a", clock() - 2, "t")
    c = enqueue(store, "job-c", clock() - 1, "t")
    b = enqueue(store, "job-b", clock(), "t")
    assert claim(store, job_kind="sms", workspace_id="ws").id == b.id
    assert claim(store, job_kind="sms").id == c.id


def test_exhausted_attempts_are_not_claimable(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    fail(store, claim(store), retryable=False)
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10) is None


def test_terminal_occurrences_are_not_claimable(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    succeed(store, claim(store))
    clock.advance(10_000)
    assert store.claim_next(owner_id="w1", lease_ms=1_000) is None
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10) is None
    assert store.get_occurrence(occurrence.id).status == "succeeded"


# -- targeted claims ------------------------------------------------------------------------


def test_claim_occurrence_targets_one_without_consuming_other_work(
    store, store_factory, clock, authority
):
    make_job(store, authority, "job-a")
    first = enqueue(store, "job-a", clock() - 100, "first")
    second = enqueue(store, "job-a", clock(), "second")
    other = store_factory()
    claimed = other.claim_occurrence(occurrence_id=second.id, owner_id="w1", lease_ms=1_000)
    assert claimed is not None
    assert claimed.id == second.id
    assert (claimed.attempt, claimed.fence, claimed.lease_owner) == (1, 1, "w1")
    assert claimed.lease_expires_at == clock() + 1_000
    assert store.get_occurrence(first.id).status == "queued"
    event = store.history(occurrence_id=second.id)[0]
    assert event.type == "occurrence_claimed"
    assert (event.owner_id, event.fence) == ("w1", 1)
    assert event.data == {
        "attempt": 1,
        "previousOwner": None,
        "previousStatus": "queued",
        "targeted": True,
    }
    # A live lease: nobody else gets it.
    assert store.claim_occurrence(occurrence_id=second.id, owner_id="w2", lease_ms=1_000) is None
    assert store.claim_occurrence(occurrence_id=second.id, owner_id="w1", lease_ms=1_000) is None
    # After expiry it can be reclaimed, fencing w1 out.
    clock.advance(1_000)
    reclaimed = store.claim_occurrence(occurrence_id=second.id, owner_id="w2", lease_ms=1_000)
    assert reclaimed is not None
    assert (reclaimed.attempt, reclaimed.fence, reclaimed.lease_owner) == (2, 2, "w2")
    event = store.history(occurrence_id=second.id)[0]
    assert event.type == "occurrence_reclaimed"
    assert event.data == {
        "attempt": 2,
        "previousOwner": "w1",
        "previousStatus": "running",
        "targeted": True,
    }
    succeed(store, reclaimed)
    assert store.claim_occurrence(occurrence_id=second.id, owner_id="w3", lease_ms=1_000) is None
    assert store.get_occurrence(first.id).status == "queued"


def test_claim_occurrence_not_due_returns_none(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock() + 50, "t")
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10) is None
    assert types(store.history(occurrence_id=occurrence.id)) == ["occurrence_enqueued"]
    clock.advance(50)
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10).fence == 1


def test_claim_occurrence_retry_wait_respects_available_at(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    fail(store, claim(store), retry_at=clock() + 30)
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10) is None
    clock.advance(30)
    again = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=10)
    assert (again.attempt, again.fence) == (2, 2)
    assert store.history(occurrence_id=occurrence.id)[0].data["previousStatus"] == "retry_wait"


def test_claim_occurrence_missing_is_not_found_and_changes_nothing(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=10)
    clock.advance(10)  # an expired final attempt waits for the lazy pass
    before = store.history(limit=200)
    with raises_code("SCHEDULER_NOT_FOUND"):
        store.claim_occurrence(occurrence_id="occ_missing", owner_id="w1", lease_ms=10)
    assert store.history(limit=200) == before
    assert store.get_occurrence(occurrence.id).status == "running"


# -- lazy dead-lettering of an expired final attempt (§2.7 row 9) ------------------------------


def _assert_lease_expired_dead_letter(store, occurrence_id, *, owner, fence, attempt, now):
    stored = store.get_occurrence(occurrence_id)
    assert stored.status == "dead_letter"
    assert stored.last_error == {
        "code": "lease_expired",
        "message": "Execution lease expired after the final allowed attempt",
    }
    assert stored.lease_owner is None
    assert stored.lease_expires_at is None
    assert stored.settled_at == now
    assert stored.updated_at == now
    assert (stored.attempt, stored.fence) == (attempt, fence)
    event = store.history(occurrence_id=occurrence_id)[0]
    assert event.type == "occurrence_dead_lettered"
    assert event.owner_id == owner
    assert event.fence == fence
    assert event.occurred_at == now
    assert event.data == {"attempt": attempt, "maxAttempts": attempt, "reason": "lease_expired"}


def test_expired_final_attempt_is_dead_lettered_by_claim_next(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=100)
    clock.advance(99)
    assert store.claim_next(owner_id="w2", lease_ms=100) is None
    assert store.get_occurrence(occurrence.id).status == "running"
    clock.advance(1)
    assert store.claim_next(owner_id="w2", lease_ms=100) is None
    _assert_lease_expired_dead_letter(
        store, occurrence.id, owner="w1", fence=1, attempt=1, now=clock()
    )
    assert types(store.history(occurrence_id=occurrence.id)) == [
        "occurrence_dead_lettered",
        "occurrence_claimed",
        "occurrence_enqueued",
    ]
    assert [o.id for o in store.list_dead_letters()] == [occurrence.id]
    with raises_code("SCHEDULER_LEASE_LOST"):
        store.settle(occurrence_id=occurrence.id, owner_id="w1", fence=1, outcome="succeeded")


def test_lazy_dead_lettering_runs_before_selecting_other_work(store, clock, authority):
    make_job(store, authority, "job-final", kind="email", max_attempts=2)
    make_job(store, authority, "job-next", kind="sms")
    final = enqueue(store, "job-final", clock(), "t")
    fail(store, claim(store, "w1"))
    claim(store, "w2", lease_ms=100)  # the final (second) attempt
    nxt = enqueue(store, "job-next", clock(), "t")
    clock.advance(100)
    # A filtered claim for other work still dead-letters the expired final attempt first.
    assert claim(store, "w3", job_kind="sms").id == nxt.id
    _assert_lease_expired_dead_letter(store, final.id, owner="w2", fence=2, attempt=2, now=clock())


def test_lazy_dead_lettering_ignores_job_disablement(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=100)
    store.update_job("job-a", expected_revision=1, patch={"enabled": False})
    clock.advance(100)
    assert store.claim_next(owner_id="w2", lease_ms=100) is None
    assert store.get_occurrence(occurrence.id).status == "dead_letter"


def test_expired_final_attempt_is_dead_lettered_by_claim_occurrence(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=100)
    clock.advance(150)
    assert store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w2", lease_ms=10) is None
    _assert_lease_expired_dead_letter(
        store, occurrence.id, owner="w1", fence=1, attempt=1, now=clock()
    )


def test_claim_occurrence_of_other_work_dead_letters_expired_final_attempts(
    store, clock, authority
):
    make_job(store, authority, "job-a", max_attempts=1)
    stale = enqueue(store, "job-a", clock(), "stale")
    claim(store, "w1", lease_ms=100)
    target = enqueue(store, "job-a", clock() + 100, "target")
    clock.advance(100)
    got = store.claim_occurrence(occurrence_id=target.id, owner_id="w2", lease_ms=10)
    assert got is not None
    assert got.id == target.id
    _assert_lease_expired_dead_letter(store, stale.id, owner="w1", fence=1, attempt=1, now=clock())


def test_expired_non_final_attempt_is_reclaimed_not_dead_lettered(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=2)
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=100)
    clock.advance(100)
    again = claim(store, "w2", lease_ms=100)
    assert (again.id, again.attempt, again.fence) == (occurrence.id, 2, 2)
    clock.advance(100)
    assert store.claim_next(owner_id="w3", lease_ms=100) is None
    _assert_lease_expired_dead_letter(
        store, occurrence.id, owner="w2", fence=2, attempt=2, now=clock()
    )


# -- arguments ---------------------------------------------------------------------------------

BAD_CLAIM_NEXT = [
    ("owner_id", ""),
    ("owner_id", "a\nb"),
    ("owner_id", "o" * 257),
    ("owner_id", None),
    ("lease_ms", 0),
    ("lease_ms", -1),
    ("lease_ms", 86_400_001),
    ("lease_ms", True),
    ("lease_ms", "1000"),
    ("lease_ms", 1.5),
    ("lease_ms", None),
    ("job_kind", ""),
    ("job_kind", "k" * 129),
    ("job_kind", 5),
    ("workspace_id", ""),
    ("workspace_id", "w" * 257),
    ("workspace_id", "a\x01"),
]


@pytest.mark.parametrize(("field", "value"), BAD_CLAIM_NEXT)
def test_claim_next_rejects_invalid_arguments(store, clock, authority, field, value):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    arguments = {"owner_id": "w1", "lease_ms": 1_000, field: value}
    with raises_code(INVALID):
        store.claim_next(**arguments)
    assert store.get_occurrence(occurrence.id).status == "queued"


BAD_CLAIM_OCCURRENCE = [
    ("occurrence_id", ""),
    ("occurrence_id", None),
    ("owner_id", " "),
    ("lease_ms", 0),
    ("lease_ms", 86_400_001),
    ("lease_ms", False),
]


@pytest.mark.parametrize(("field", "value"), BAD_CLAIM_OCCURRENCE)
def test_claim_occurrence_rejects_invalid_arguments(store, clock, authority, field, value):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    arguments = {"occurrence_id": occurrence.id, "owner_id": "w1", "lease_ms": 1_000}
    arguments[field] = value
    with raises_code(INVALID):
        store.claim_occurrence(**arguments)
    assert store.get_occurrence(occurrence.id).status == "queued"


def test_maximum_lease_is_accepted(store, clock, authority):
    make_job(store, authority, "job-a")
    enqueue(store, "job-a", clock(), "t")
    claimed = claim(store, lease_ms=86_400_000)
    assert claimed.lease_expires_at == clock() + 86_400_000
