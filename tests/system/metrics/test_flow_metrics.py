"""Blocked occurrences in the metrics (SPEC §10): ``jobledger_occurrences{status="blocked"}``
counts children waiting for parents, per kind, and drops as parents settle."""

from __future__ import annotations

from jobledger import EnqueueRequest, open_store
from jobledger.testing import DEFAULT_START_MS, FakeClock
from tests.system.metrics.test_prometheus import store_scrape, target, value

# fixture: target (over both stores, through ``backend``)
__all__ = ["target"]

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def test_blocked_children_are_counted_until_their_parents_settle(target):
    clock = FakeClock(DEFAULT_START_MS)
    with open_store(target, clock=clock) as store:
        store.create_job(id="fetch", kind="fetch", authority=AUTHORITY)
        store.create_job(id="join", kind="join", authority=AUTHORITY)
        parents = store.enqueue_batch([EnqueueRequest("fetch", clock(), f"p{i}") for i in range(3)])
        store.enqueue_batch(
            [
                EnqueueRequest("join", clock(), f"c{i}", after=tuple(p.id for p in parents))
                for i in range(2)
            ]
        )
        _, scraped = store_scrape(store)
        assert value(scraped, "jobledger_occurrences", kind="join", status="blocked") == 2
        assert value(scraped, "jobledger_occurrences", kind="fetch", status="blocked") == 0
        for parent in parents:
            held = store.claim_occurrence(occurrence_id=parent.id, owner_id="w", lease_ms=60_000)
            assert held is not None
            store.settle(occurrence_id=held.id, owner_id="w", fence=held.fence, outcome="succeeded")
        _, scraped = store_scrape(store)
        assert value(scraped, "jobledger_occurrences", kind="join", status="blocked") == 0
        assert value(scraped, "jobledger_occurrences", kind="join", status="queued") == 2
