"""The audit trail: history filters, ordering and limits; dead-letter listing (§3.5, §3.10)."""

from __future__ import annotations

import pytest

from .helpers import claim, enqueue, fail, make_job, raises_code, succeed, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def test_full_lifecycle_event_sequence(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=2)
    occurrence = enqueue(store, "job-a", clock(), "t")
    first = claim(store, "w1")
    fail(store, first, retry_at=clock() + 50)
    clock.advance(50)
    second = claim(store, "w2")
    fail(store, second)
    assert types(store.history(occurrence_id=occurrence.id)) == [
        "occurrence_dead_lettered",
        "occurrence_claimed",
        "occurrence_retry_scheduled",
        "occurrence_claimed",
        "occurrence_enqueued",
    ]
    assert types(store.history(job_id="job-a")) == [
        "occurrence_dead_lettered",
        "occurrence_claimed",
        "occurrence_retry_scheduled",
        "occurrence_claimed",
        "occurrence_enqueued",
        "job_created",
    ]
    events = store.history(occurrence_id=occurrence.id)
    assert [(e.owner_id, e.fence) for e in events] == [
        ("w2", 2),
        ("w2", 2),
        ("w1", 1),
        ("w1", 1),
        (None, None),
    ]
    ids = [e.event_id for e in events]
    assert ids == sorted(ids, reverse=True)
    assert len(set(ids)) == len(ids)
    assert all(e.job_id == "job-a" and e.occurrence_id == occurrence.id for e in events)


def test_success_with_renew_event_sequence_and_data(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    running = claim(store, "w1")
    store.renew(occurrence_id=occurrence.id, owner_id="w1", fence=1, lease_ms=5_000)
    succeed(store, running, result={"ok": True})
    events = store.history(occurrence_id=occurrence.id)
    assert [(e.type, e.data) for e in events] == [
        ("occurrence_succeeded", {"attempt": 1, "maxAttempts": 3}),
        ("occurrence_renewed", {"leaseExpiresAt": clock() + 5_000}),
        ("occurrence_claimed", {"attempt": 1, "previousOwner": None, "previousStatus": "queued"}),
        ("occurrence_enqueued", {"jobRevision": 1, "scheduledFor": clock(), "triggerKey": "t"}),
    ]


def test_history_filters(store, clock, authority):
    make_job(store, authority, "job-a")
    make_job(store, authority, "job-b")
    a1 = enqueue(store, "job-a", clock(), "one")
    a2 = enqueue(store, "job-a", clock(), "two")
    b1 = enqueue(store, "job-b", clock(), "one")
    assert types(store.history()) == [
        "occurrence_enqueued",
        "occurrence_enqueued",
        "occurrence_enqueued",
        "job_created",
        "job_created",
    ]
    assert [e.occurrence_id for e in store.history()][:3] == [b1.id, a2.id, a1.id]
    assert [e.occurrence_id for e in store.history(job_id="job-a")] == [a2.id, a1.id, None]
    assert [e.occurrence_id for e in store.history(occurrence_id=a1.id)] == [a1.id]
    assert [e.occurrence_id for e in store.history(occurrence_id=a1.id, job_id="job-a")] == [a1.id]
    assert store.history(occurrence_id=a1.id, job_id="job-b") == []
    assert store.history(job_id="nobody") == []
    assert store.history(occurrence_id="occ_nothing") == []
    assert store.history(job_id=" job-b ")[0].occurrence_id == b1.id


def test_history_default_limit_is_50_and_cap_is_200(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    claim(store, "w1", lease_ms=10_000)
    for _ in range(205):
        store.renew(occurrence_id=occurrence.id, owner_id="w1", fence=1, lease_ms=10_000)
    # 1 job_created + 1 enqueued + 1 claimed + 205 renewed = 208 events
    assert len(store.history()) == 50
    assert len(store.history(limit=None)) == 50
    assert len(store.history(limit=10_000)) == 200
    assert len(store.history(limit=200)) == 200
    assert len(store.history(limit=201)) == 200
    assert len(store.history(occurrence_id=occurrence.id, limit=10_000)) == 200
    assert len(store.history(limit=1)) == 1
    assert len(store.history(limit=3.0)) == 3
    newest = store.history(limit=2)
    assert types(newest) == ["occurrence_renewed", "occurrence_renewed"]
    assert newest[0].event_id > newest[1].event_id
    # The cap keeps the newest 200: all of them renewals (205 were written).
    assert set(types(store.history(job_id="job-a", limit=10_000))) == {"occurrence_renewed"}


@pytest.mark.parametrize("limit", [0, -1, 1.5, "5", True, False, [5], float("nan")])
def test_history_rejects_invalid_limits(store, limit):
    with raises_code(INVALID):
        store.history(limit=limit)


@pytest.mark.parametrize("field", ["occurrence_id", "job_id"])
@pytest.mark.parametrize("value", ["", " ", "a\tb", 5])
def test_history_rejects_invalid_filters(store, field, value):
    with raises_code(INVALID):
        store.history(**{field: value})


# -- dead letters -------------------------------------------------------------------------------


def _dead(store, clock, job_id, key):
    occurrence = enqueue(store, job_id, clock(), key)
    running = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w", lease_ms=100)
    assert running is not None
    return fail(store, running, retryable=False)


def test_list_dead_letters_order_and_job_filter(store, clock, authority):
    make_job(store, authority, "job-a")
    make_job(store, authority, "job-b")
    oldest = _dead(store, clock, "job-a", "k0")
    clock.advance(10)
    same_instant = [_dead(store, clock, "job-a", key) for key in ("k1", "k2", "k3")]
    other_job = _dead(store, clock, "job-b", "k4")
    clock.advance(10)
    newest = _dead(store, clock, "job-a", "k5")
    # A succeeded and a retrying occurrence are not dead letters.
    succeed(
        store,
        store.claim_occurrence(
            occurrence_id=enqueue(store, "job-a", clock(), "ok").id, owner_id="w", lease_ms=100
        ),
    )
    fail(
        store,
        store.claim_occurrence(
            occurrence_id=enqueue(store, "job-a", clock(), "retry").id, owner_id="w", lease_ms=100
        ),
    )
    tied = sorted([*(o.id for o in same_instant), other_job.id])
    assert [o.id for o in store.list_dead_letters()] == [newest.id, *tied, oldest.id]
    tied_a = sorted(o.id for o in same_instant)
    assert [o.id for o in store.list_dead_letters(job_id="job-a")] == [
        newest.id,
        *tied_a,
        oldest.id,
    ]
    assert [o.id for o in store.list_dead_letters(job_id="job-b")] == [other_job.id]
    assert store.list_dead_letters(job_id="nobody") == []
    assert [o.id for o in store.list_dead_letters(limit=2)] == [newest.id, tied[0]]
    listed = store.list_dead_letters(job_id="job-b")[0]
    assert listed == store.get_occurrence(other_job.id)
    assert listed.status == "dead_letter"


def test_list_dead_letters_limits(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    for index in range(205):
        enqueue(store, "job-a", clock() - index, f"k{index}")
    for index in range(205):
        fail(store, claim(store, f"w{index}"), retryable=False)
    assert len(store.list_dead_letters()) == 50
    assert len(store.list_dead_letters(limit=10_000)) == 200
    assert len(store.list_dead_letters(job_id="job-a", limit=201)) == 200


@pytest.mark.parametrize("limit", [0, 1.5, "5", True])
def test_list_dead_letters_rejects_invalid_limits(store, limit):
    with raises_code(INVALID):
        store.list_dead_letters(limit=limit)


def test_list_dead_letters_rejects_invalid_job_id(store):
    with raises_code(INVALID):
        store.list_dead_letters(job_id="")
