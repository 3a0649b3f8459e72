"""Batches: claim_batch and settle_batch — the same rules as claim_next / settle, one commit."""

from __future__ import annotations

import pytest

from jobledger import LeaseLost, Settlement

from .helpers import LEASE_MS, claim, enqueue, make_job, raises_code, types

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def _settlement(occurrence, **options) -> Settlement:
    options.setdefault("outcome", "succeeded")
    options.setdefault("owner_id", occurrence.lease_owner)
    options.setdefault("fence", occurrence.fence)
    return Settlement(occurrence_id=occurrence.id, **options)


def _snapshot(store, ids):
    """Everything a write could change: the occurrences and the whole event log."""
    return [store.get_occurrence(key) for key in ids], store.history(limit=200)


# -- claim_batch ------------------------------------------------------------------------------


def test_claim_batch_claims_in_claim_next_order_with_one_event_each(store, clock, authority):
    make_job(store, authority, "job-a")
    now = clock()
    late_due = enqueue(store, "job-a", now - 10_000, "a", available_at=now - 10)
    early_due = enqueue(store, "job-a", now, "b", available_at=now - 20)
    same_due_earlier_schedule = enqueue(store, "job-a", now - 30_000, "c", available_at=now - 10)
    not_due = enqueue(store, "job-a", now + 5, "d")
    claimed = store.claim_batch(owner_id=" w1 ", lease_ms=2_000, limit=10)
    assert [o.id for o in claimed] == [early_due.id, same_due_earlier_schedule.id, late_due.id]
    for occurrence in claimed:
        assert occurrence.status == "running"
        assert (occurrence.attempt, occurrence.fence) == (1, 1)
        assert occurrence.lease_owner == "w1"
        assert occurrence.lease_expires_at == now + 2_000
        assert store.get_occurrence(occurrence.id) == occurrence
        event = store.history(occurrence_id=occurrence.id)[0]
        assert (event.type, event.owner_id, event.fence, event.occurred_at) == (
            "occurrence_claimed",
            "w1",
            1,
            now,
        )
        assert event.data == {"attempt": 1, "previousOwner": None, "previousStatus": "queued"}
    assert store.get_occurrence(not_due.id).status == "queued"


def test_claim_batch_stops_at_limit_and_leaves_the_rest_in_order(store, clock, authority):
    make_job(store, authority, "job-a")
    occurrences = [enqueue(store, "job-a", clock() - 100 + i, f"t{i}") for i in range(5)]
    first = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=2)
    second = store.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=2)
    third = store.claim_batch(owner_id="w3", lease_ms=LEASE_MS, limit=2)
    assert [o.id for o in first + second + third] == [o.id for o in occurrences]
    assert [len(first), len(second), len(third)] == [2, 2, 1]
    assert store.claim_batch(owner_id="w4", lease_ms=LEASE_MS, limit=2) == []


def test_claim_batch_reclaims_expired_leases_in_due_order(store, clock, authority):
    make_job(store, authority, "job-a")
    make_job(store, authority, "job-b", kind="sms")
    queued = [enqueue(store, "job-a", clock() - 50 + i, f"a{i}") for i in range(4)]
    enqueue(store, "job-b", clock() - 60, "b")
    expired = claim(store, "w0", lease_ms=10, job_kind="email")  # a0; its lease ends at now+10
    clock.advance(10)
    before = store.history(limit=200)
    batch = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5, job_kind="email")
    # Due instants: a1..a3 were due before a0's lease ran out, so a0 is reclaimed last.
    assert [o.id for o in batch] == [o.id for o in queued[1:]] + [expired.id]
    assert (batch[-1].attempt, batch[-1].fence, batch[-1].lease_owner) == (2, 2, "w1")
    new_events = store.history(limit=200)[: -len(before)]
    assert types(new_events) == ["occurrence_reclaimed"] + ["occurrence_claimed"] * 3
    assert new_events[0].data == {"attempt": 2, "previousOwner": "w0", "previousStatus": "running"}
    assert [e.occurrence_id for e in reversed(new_events)] == [o.id for o in batch]


def test_claim_batch_applies_the_workspace_filter(store, clock, authority):
    make_job(store, {**authority, "workspaceId": "ws-a"}, "job-a")
    make_job(store, {**authority, "workspaceId": "ws-b"}, "job-b")
    a = enqueue(store, "job-a", clock() - 5, "t")
    b = enqueue(store, "job-b", clock() - 9, "t")
    assert [
        o.id
        for o in store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5, workspace_id="ws-a")
    ] == [a.id]
    assert store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5, workspace_id="ws-z") == []
    assert [o.id for o in store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5)] == [b.id]


def test_claim_batch_skips_disabled_jobs(store, clock, authority):
    make_job(store, authority, "job-a")
    make_job(store, authority, "job-off")
    enqueue(store, "job-off", clock() - 10, "t")
    store.update_job("job-off", expected_revision=1, patch={"enabled": False})
    live = enqueue(store, "job-a", clock(), "t")
    assert [o.id for o in store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5)] == [live.id]


def test_claim_batch_dead_letters_expired_final_leases_first(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=1)
    final = enqueue(store, "job-a", clock(), "t1")
    claim(store, "w0", lease_ms=10)
    fresh = enqueue(store, "job-a", clock(), "t2")
    clock.advance(10)
    claimed = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=5)
    assert [o.id for o in claimed] == [fresh.id]
    dead = store.get_occurrence(final.id)
    assert dead.status == "dead_letter"
    assert dead.last_error["code"] == "lease_expired"
    assert types(store.history(occurrence_id=final.id))[0] == "occurrence_dead_lettered"


def test_concurrent_handles_never_claim_the_same_occurrence(store_factory, clock, authority):
    first, second = store_factory(), store_factory()
    make_job(first, authority, "job-a")
    ids = {enqueue(first, "job-a", clock() - 100 + i, f"t{i}").id for i in range(12)}
    seen: list[str] = []
    while batch := first.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=3):
        seen += [o.id for o in batch]
        seen += [o.id for o in second.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=2)]
    assert sorted(seen) == sorted(ids)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("limit", 0),
        ("limit", -1),
        ("limit", 1001),
        ("limit", True),
        ("limit", 2.5),
        ("limit", "3"),
        ("limit", None),
        ("owner_id", ""),
        ("lease_ms", 0),
        ("job_kind", ""),
        ("workspace_id", 7),
    ],
)
def test_claim_batch_rejects_invalid_arguments_and_changes_nothing(
    store, clock, authority, field, value
):
    make_job(store, authority, "job-a")
    occurrence = enqueue(store, "job-a", clock(), "t")
    before = _snapshot(store, [occurrence.id])
    arguments = {"owner_id": "w1", "lease_ms": LEASE_MS, "limit": 3, field: value}
    with raises_code(INVALID):
        store.claim_batch(**arguments)
    assert _snapshot(store, [occurrence.id]) == before


def test_claim_batch_of_the_maximum_size(store, clock, authority):
    make_job(store, authority, "job-a")
    for index in range(3):
        enqueue(store, "job-a", clock(), f"t{index}")
    assert len(store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=1000)) == 3


# -- settle_batch -----------------------------------------------------------------------------


@pytest.fixture
def three_running(store, clock, authority):
    make_job(store, authority, "job-a", max_attempts=2)
    for index in range(3):
        enqueue(store, "job-a", clock() - 10 + index, f"t{index}")
    claimed = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=3)
    assert len(claimed) == 3
    clock.advance(5)
    return claimed


def test_settle_batch_settles_each_as_settle_would(store, clock, three_running):
    ok, retry, dead = three_running
    results = store.settle_batch(
        [
            _settlement(ok, result={"sent": 1}),
            _settlement(retry, outcome="failed", error={"code": "flaky"}, retry_at=clock() + 50),
            _settlement(dead, outcome="failed", retryable=False),
        ]
    )
    assert [r.id for r in results] == [ok.id, retry.id, dead.id]
    assert [r.status for r in results] == ["succeeded", "retry_wait", "dead_letter"]
    assert results[0].result == {"sent": 1}
    assert results[0].settled_at == clock()
    assert results[1].available_at == clock() + 50
    assert results[1].last_error == {"code": "flaky"}
    assert results[2].last_error == {"code": "execution_failed", "message": "Execution failed"}
    for result in results:
        assert store.get_occurrence(result.id) == result
    events = [store.history(occurrence_id=o.id)[0] for o in three_running]
    assert types(events) == [
        "occurrence_succeeded",
        "occurrence_retry_scheduled",
        "occurrence_dead_lettered",
    ]
    assert all((e.owner_id, e.fence, e.occurred_at) == ("w1", 1, clock()) for e in events)
    assert events[1].data["retryAt"] == clock() + 50


def test_a_lost_lease_in_a_batch_changes_nothing_and_spares_the_others(store, clock, three_running):
    first, stale, third = three_running
    before = store.get_occurrence(stale.id)
    events_before = store.history(occurrence_id=stale.id)
    results = store.settle_batch(
        [
            _settlement(first),
            Settlement(occurrence_id=stale.id, owner_id="w1", fence=9, outcome="succeeded"),
            _settlement(third, outcome="failed"),
        ]
    )
    assert results[0].status == "succeeded"
    assert isinstance(results[1], LeaseLost)
    assert results[1].code == "SCHEDULER_LEASE_LOST"
    assert stale.id in results[1].message
    assert results[2].status == "retry_wait"
    assert store.get_occurrence(stale.id) == before
    assert store.history(occurrence_id=stale.id) == events_before


def test_settle_batch_fences_expired_and_foreign_leases(store, clock, three_running):
    first, second, third = three_running
    clock.advance(LEASE_MS)  # every lease expires at exactly now: expired
    results = store.settle_batch([_settlement(first), _settlement(second)])
    assert all(isinstance(r, LeaseLost) for r in results)
    reclaimed = claim(store, "w2")
    assert reclaimed.id == first.id
    (stale,) = store.settle_batch([_settlement(first)])  # w1 at fence 1: fenced out by w2
    assert isinstance(stale, LeaseLost)
    (settled,) = store.settle_batch([_settlement(reclaimed)])
    assert (settled.status, settled.fence) == ("succeeded", 2)
    assert store.get_occurrence(third.id).status == "running"


def test_settle_batch_of_nothing_writes_nothing(store, three_running):
    before = store.history(limit=200)
    assert store.settle_batch([]) == []
    assert store.settle_batch(()) == []
    assert store.history(limit=200) == before


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda ok, other: "not a list", id="not-a-sequence"),
        pytest.param(lambda ok, other: {_settlement(ok)}, id="a-set"),
        pytest.param(lambda ok, other: [_settlement(ok), None], id="not-a-settlement"),
        pytest.param(lambda ok, other: [_settlement(ok), _settlement(ok)], id="duplicate"),
        pytest.param(
            lambda ok, other: [_settlement(ok), _settlement(other, outcome="done")],
            id="bad-outcome",
        ),
        pytest.param(
            lambda ok, other: [_settlement(ok), _settlement(other, fence=0)], id="bad-fence"
        ),
        pytest.param(
            lambda ok, other: [_settlement(ok), _settlement(other, retryable=1)],
            id="retryable-not-bool",
        ),
        pytest.param(
            lambda ok, other: [_settlement(ok), _settlement(other, result={1, 2})],
            id="result-not-json",
        ),
        pytest.param(
            lambda ok, other: [
                _settlement(ok),
                _settlement(other, outcome="failed", retry_at=-1),
            ],
            id="bad-retry-at",
        ),
        pytest.param(lambda ok, other: [_settlement(ok)] * 1001, id="too-many"),
    ],
)
def test_settle_batch_validates_everything_before_writing(store, three_running, build):
    ok, other, _ = three_running
    ids = [o.id for o in three_running]
    before = _snapshot(store, ids)
    with raises_code(INVALID) as info:
        store.settle_batch(build(ok, other))
    assert _snapshot(store, ids) == before
    if "[1]" in info.value.message:
        assert info.value.details == {"index": 1}


def test_settle_batch_reports_the_index_of_the_bad_item(store, three_running):
    ok, other, _ = three_running
    with raises_code(INVALID) as info:
        store.settle_batch([_settlement(ok), _settlement(other, outcome="nope")])
    assert info.value.details == {"index": 1}
    assert info.value.message.startswith("settlements[1]: ")
