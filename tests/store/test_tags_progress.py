"""Tags and metadata at enqueue, found by tag, and a handler's fenced progress (issue 32, item
11) — on both stores."""

from __future__ import annotations

import itertools

import pytest

from jobledger import EnqueueRequest, LeaseLost
from jobledger.store.operations import listing

from .helpers import LEASE_MS, make_job, raises_code, succeed

INVALID = "SCHEDULER_INVALID_ARGUMENT"
_SERIAL = itertools.count()


def _enqueue(store, clock, job_id="charge", key=None, **options):
    [occurrence] = store.enqueue_batch(
        [
            EnqueueRequest(
                job_id=job_id,
                scheduled_for=clock(),
                trigger_key=f"key:{key}" if key else f"t-{next(_SERIAL)}",
                once_per_trigger=key is not None,
                **options,
            )
        ]
    )
    return occurrence


def _ids(store, **filters):
    found, cursor = [], None
    while True:
        page = store.list_occurrences(limit=2, cursor=cursor, **filters)
        found += [o.id for o in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return found


def test_tags_and_meta_are_stored_and_read_back(store, clock, authority):
    make_job(store, authority, "charge", kind="charge")
    made = _enqueue(
        store,
        clock,
        key="order-21",
        tags=["customer:21", "vip", "customer:21"],
        meta={"order": 21, "source": "checkout"},
    )
    assert made.tags == ("customer:21", "vip")  # duplicates dropped, order kept
    assert made.meta == {"order": 21, "source": "checkout"}
    stored = store.get_occurrence(made.id)
    assert stored.tags == ("customer:21", "vip") and stored.meta == made.meta
    # a reused key returns the first occurrence with the first enqueue's tags
    again = _enqueue(store, clock, key="order-21", tags=["other"])
    assert again.id == made.id and again.deduplicated and again.tags == ("customer:21", "vip")
    plain = _enqueue(store, clock)
    assert plain.tags == () and plain.meta is None
    assert store.get_occurrence(plain.id).tags == ()


def test_a_tag_finds_its_occurrences_newest_first_with_other_filters(
    store, clock, authority, monkeypatch
):
    make_job(store, authority, "charge", kind="charge")
    make_job(store, authority, "ship", kind="ship")
    made = [
        _enqueue(store, clock, "charge", tags=["customer:21"]),
        _enqueue(store, clock, "ship", tags=["customer:21", "vip"]),
        _enqueue(store, clock, "ship", tags=["customer:22"]),
        _enqueue(store, clock, "charge", key="order-21", tags=["customer:21"]),
        _enqueue(store, clock, "ship"),
    ]
    assert _ids(store, tag="customer:21") == [made[3].id, made[1].id, made[0].id]
    assert _ids(store, tag="vip") == [made[1].id]
    assert _ids(store, tag="customer:21", job_id="ship") == [made[1].id]
    assert _ids(store, tag="customer:21", key="order-21") == [made[3].id]
    assert _ids(store, tag="vip", key="order-21") == []
    running = store.claim_occurrence(occurrence_id=made[0].id, owner_id="w", lease_ms=LEASE_MS)
    succeed(store, running)
    assert _ids(store, tag="customer:21", status="succeeded") == [made[0].id]
    monkeypatch.setattr(listing, "JOB_SCAN", 1)  # a bounded walk pages on
    assert _ids(store, tag="customer:21", kind="charge") == [made[3].id, made[0].id]
    assert _ids(store, tag="nobody") == []


@pytest.mark.parametrize(
    ("options", "field", "reason"),
    [
        ({"tags": "vip"}, "tags", "type"),
        ({"tags": [1]}, "tags", "type"),
        ({"tags": [""]}, "tags", "length"),
        ({"tags": ["x" * 65]}, "tags", "length"),
        ({"tags": ["has space"]}, "tags", "characters"),
        ({"tags": ["é"]}, "tags", "characters"),
        ({"tags": [f"t{n}" for n in range(17)]}, "tags", "count"),
        ({"meta": ["not", "an", "object"]}, "meta", "type"),
        ({"meta": {"blob": "x" * 5000}}, "meta", "size"),
    ],
)
def test_bad_tags_and_meta_are_refused_and_change_nothing(
    store, clock, authority, options, field, reason
):
    make_job(store, authority, "charge", kind="charge")
    with raises_code(INVALID) as info:
        _enqueue(store, clock, **options)
    assert info.value.details["field"] == field and info.value.details["reason"] == reason
    assert store.list_occurrences().items == ()
    with raises_code(INVALID):
        store.list_occurrences(tag="has space")


def test_prune_and_job_removal_take_the_tags_with_the_rows(store, clock, authority):
    make_job(store, authority, "charge", kind="charge")
    make_job(store, authority, "ship", kind="ship")
    old = _enqueue(store, clock, "charge", tags=["customer:21"])
    succeed(store, store.claim_occurrence(occurrence_id=old.id, owner_id="w", lease_ms=LEASE_MS))
    shipped = _enqueue(store, clock, "ship", tags=["customer:21"])
    succeed(
        store, store.claim_occurrence(occurrence_id=shipped.id, owner_id="w", lease_ms=LEASE_MS)
    )
    clock.advance(10_000)
    kept = _enqueue(store, clock, "charge", tags=["customer:21"])
    store.prune(before=clock() - 1, actor="ops")
    assert _ids(store, tag="customer:21") == [kept.id]
    succeed(store, store.claim_occurrence(occurrence_id=kept.id, owner_id="w", lease_ms=LEASE_MS))
    store.remove_job("charge", actor="ops", reason="gone", expected_revision=1)
    assert _ids(store, tag="customer:21") == []


def test_progress_is_fenced_to_the_current_attempt(store, clock, authority):
    make_job(store, authority, "charge", kind="charge", max_attempts=3)
    made = _enqueue(store, clock)
    assert made.progress is None
    first = store.claim_occurrence(occurrence_id=made.id, owner_id="w1", lease_ms=LEASE_MS)
    holder = {"occurrence_id": made.id, "owner_id": "w1", "fence": first.fence}
    reported = store.record_progress(**holder, done=3, total=10, message="charging")
    assert (reported.done, reported.total, reported.message) == (3, 10, "charging")
    assert reported.attempt == 1 and reported.at == clock()
    stored = store.get_occurrence(made.id)
    assert stored.progress == reported and stored.progress.fraction == 0.3
    assert stored.lease_expires_at == first.lease_expires_at  # no renewal, no new instants
    assert stored.updated_at == first.updated_at
    # The lease expires and another worker takes the occurrence over: the first attempt is
    # superseded, and its progress is refused.
    clock.advance(LEASE_MS + 1)
    second = store.claim_next(owner_id="w2", lease_ms=LEASE_MS)
    assert second is not None and second.id == made.id and second.fence > first.fence
    with pytest.raises(LeaseLost):
        store.record_progress(**holder, done=9, total=10)
    assert store.get_occurrence(made.id).progress == reported
    newer = store.record_progress(
        occurrence_id=made.id, owner_id="w2", fence=second.fence, done=1.5
    )
    assert newer.attempt == 2 and newer.total is None and newer.message is None
    assert store.get_occurrence(made.id).progress == newer
    succeed(store, store.get_occurrence(made.id))
    with pytest.raises(LeaseLost):  # settled: nobody holds it any more
        store.record_progress(occurrence_id=made.id, owner_id="w2", fence=second.fence, done=2)


@pytest.mark.parametrize(
    ("done", "total", "message"),
    [
        (-1, None, None),
        (True, None, None),
        (float("nan"), None, None),
        (1, 0, None),
        (1, None, "x" * 501),
        (1, None, 5),
    ],
)
def test_bad_progress_is_refused(store, clock, authority, done, total, message):
    make_job(store, authority, "charge", kind="charge")
    made = _enqueue(store, clock)
    claimed = store.claim_occurrence(occurrence_id=made.id, owner_id="w1", lease_ms=LEASE_MS)
    with raises_code(INVALID):
        store.record_progress(
            occurrence_id=made.id,
            owner_id="w1",
            fence=claimed.fence,
            done=done,
            total=total,
            message=message,
        )
    assert store.get_occurrence(made.id).progress is None
