"""Finding one customer's work (issue 32, item 7): occurrences by idempotency key (across jobs,
without the ``key:`` prefix), by partition and by queue — alone and combined with the other
filters, newest first, paged — on both stores."""

from __future__ import annotations

import pytest

from jobledger.models import EnqueueRequest
from jobledger.store.operations import listing

from .helpers import make_job, raises_code, succeed

INVALID = "SCHEDULER_INVALID_ARGUMENT"


def _keyed(store, job_id, at, key, **options):
    """An enqueue with an idempotency key, as ``App.enqueue(key=…)`` makes it."""
    [occurrence] = store.enqueue_batch(
        [
            EnqueueRequest(
                job_id=job_id,
                scheduled_for=at,
                trigger_key=f"key:{key}",
                once_per_trigger=True,
                **options,
            )
        ]
    )
    return occurrence


def _seed(store, clock, authority):
    """Order 21 and order 22, each charged, shipped and mailed (jobs in two queues), partitioned
    by customer; plus unkeyed noise. Returns {name: occurrence}."""
    make_job(store, authority, "charge", kind="charge", queue="payments")
    make_job(store, authority, "ship", kind="ship")
    make_job(store, authority, "email-receipt", kind="mail", queue="emails")
    made = {}
    for order, customer in ((21, "customer:7"), (22, "customer:8")):
        for job in ("charge", "ship", "email-receipt"):
            made[f"{job}-{order}"] = _keyed(
                store, job, clock(), f"order-{order}", partition=customer
            )
        made[f"noise-{order}"] = store.enqueue_occurrence(
            job_id="ship", scheduled_for=clock(), trigger_key=f"t{order}", partition=customer
        )
    made["other"] = store.enqueue_occurrence(
        job_id="email-receipt", scheduled_for=clock(), trigger_key="t-other"
    )
    return made


def _ids(store, **filters):
    pages, cursor = [], None
    while True:
        page = store.list_occurrences(limit=2, cursor=cursor, **filters)
        pages.append([o.id for o in page.items])
        cursor = page.next_cursor
        if cursor is None:
            return [i for page in pages for i in page]


def test_a_key_finds_its_occurrences_across_jobs_without_the_prefix(store, clock, authority):
    made = _seed(store, clock, authority)
    expected = [made[f"{job}-21"].id for job in ("email-receipt", "ship", "charge")]
    assert _ids(store, key="order-21") == expected  # newest first
    assert _ids(store, key=" order-21 ") == expected  # trimmed, as enqueue trims it
    assert _ids(store, key="key:order-21") == []  # the key as given, never its stored form
    assert _ids(store, key="order-2") == []  # exact, not a prefix
    assert _ids(store, key="order-21", job_id="ship") == [made["ship-21"].id]
    assert _ids(store, key="order-21", queue="emails") == [made["email-receipt-21"].id]


def test_a_partition_and_a_queue_are_filters(store, clock, authority):
    made = _seed(store, clock, authority)
    customer_7 = [
        made[name].id for name in ("noise-21", "email-receipt-21", "ship-21", "charge-21")
    ]
    assert _ids(store, partition="customer:7") == customer_7
    assert _ids(store, partition="customer:7", job_id="ship") == [
        made["noise-21"].id,
        made["ship-21"].id,
    ]
    assert _ids(store, queue="emails") == [
        made[name].id for name in ("other", "email-receipt-22", "email-receipt-21")
    ]
    assert _ids(store, queue="emails", partition="customer:8") == [made["email-receipt-22"].id]
    assert _ids(store, partition="customer:9") == []


def test_filters_combine_with_status_and_kind(store, clock, authority):
    made = _seed(store, clock, authority)
    running = store.claim_occurrence(occurrence_id=made["charge-21"].id, owner_id="w", lease_ms=100)
    succeed(store, running)
    assert _ids(store, key="order-21", status="succeeded") == [made["charge-21"].id]
    assert _ids(store, key="order-21", status="queued") == [
        made["email-receipt-21"].id,
        made["ship-21"].id,
    ]
    assert _ids(store, partition="customer:7", kind="ship") == [
        made["noise-21"].id,
        made["ship-21"].id,
    ]
    assert _ids(store, queue="payments", status="queued") == [made["charge-22"].id]


def test_a_filtered_walk_is_bounded_and_pages_on(store, clock, authority, monkeypatch):
    made = _seed(store, clock, authority)
    monkeypatch.setattr(listing, "JOB_SCAN", 2)
    # customer:7's rows, newest first: noise-21 (ship), email-receipt-21, ship-21, charge-21.
    first = store.list_occurrences(partition="customer:7", kind="ship", limit=5)
    assert [o.id for o in first.items] == [made["noise-21"].id]
    assert first.next_cursor is not None  # the walk stopped at its bound, not at the end
    assert _ids(store, partition="customer:7", kind="ship") == [
        made["noise-21"].id,
        made["ship-21"].id,
    ]


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"key": ""}, "key"),
        ({"key": "k" * 201}, "key"),
        ({"key": 21}, "key"),
        ({"partition": "p" * 257}, "partition"),
        ({"partition": "bad\x00"}, "partition"),
        ({"queue": "q" * 65}, "queue"),
    ],
)
def test_bad_filters_are_refused(store, filters, field):
    with raises_code(INVALID) as info:
        store.list_occurrences(**filters)
    assert field in info.value.message
