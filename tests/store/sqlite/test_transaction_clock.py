"""Lease time is read inside the write transaction (reference §5.2 items 4–8).

The clock below records, at every reading, whether the store's connection held an open
transaction, and can jump forward at the moment a write body starts — as if the caller had
waited for the write lock.
"""

from __future__ import annotations

import pytest

import jobledger
from jobledger.testing import FakeClock

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


class ProbeClock:
    def __init__(self, start: int) -> None:
        self.inner = FakeClock(start)
        self.store: jobledger.SQLiteStore | None = None
        self.readings: list[bool] = []
        self.jump_in_transaction = 0

    def __call__(self) -> int:
        in_transaction = bool(self.store and self.store._connection.raw.in_transaction)
        self.readings.append(in_transaction)
        if in_transaction and self.jump_in_transaction:
            self.inner.advance(self.jump_in_transaction)
            self.jump_in_transaction = 0
        return self.inner()


@pytest.fixture
def probe(tmp_path):
    clock = ProbeClock(1_700_000_000_000)
    store = jobledger.open_store(tmp_path / "db" / "s.sqlite3", clock=clock)
    clock.store = store
    store.create_job(id="j", kind="k", authority=AUTHORITY)
    store.enqueue_occurrence(job_id="j", scheduled_for=clock.inner(), trigger_key="t")
    clock.readings.clear()
    yield clock, store
    store.close()


def test_every_write_reads_the_clock_inside_its_transaction(probe):
    clock, store = probe
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    store.renew(occurrence_id=claimed.id, owner_id="w", fence=1, lease_ms=1000)
    store.settle(occurrence_id=claimed.id, owner_id="w", fence=1, outcome="succeeded")
    store.create_job(id="j2", kind="k", authority=AUTHORITY)
    store.update_job("j2", expected_revision=1, patch={"enabled": False})
    assert clock.readings
    assert all(clock.readings)


def test_claim_lease_starts_when_the_transaction_starts(probe):
    clock, store = probe
    start = clock.inner()
    clock.jump_in_transaction = 250
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    assert claimed.lease_expires_at == start + 250 + 1000
    assert claimed.updated_at == start + 250


def test_renew_uses_transaction_time(probe):
    clock, store = probe
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    start = clock.inner()
    clock.jump_in_transaction = 250
    renewed = store.renew(occurrence_id=claimed.id, owner_id="w", fence=1, lease_ms=2000)
    assert renewed.lease_expires_at == start + 250 + 2000


def test_settle_is_refused_when_the_lease_expires_while_waiting_for_the_lock(probe):
    clock, store = probe
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    clock.jump_in_transaction = 1000  # now == expiry inside the transaction: expired
    with pytest.raises(jobledger.LeaseLost):
        store.settle(occurrence_id=claimed.id, owner_id="w", fence=1, outcome="succeeded")
    current = store.get_occurrence(claimed.id)
    assert current.status == "running"
    assert current.lease_owner == "w"
    assert current.fence == 1


def test_retry_at_is_floored_at_transaction_time(probe):
    clock, store = probe
    claimed = store.claim_next(owner_id="w", lease_ms=1000)
    start = clock.inner()
    clock.jump_in_transaction = 250
    retried = store.settle(
        occurrence_id=claimed.id, owner_id="w", fence=1, outcome="failed", retry_at=start + 100
    )
    assert retried.status == "retry_wait"
    assert retried.available_at == start + 250
