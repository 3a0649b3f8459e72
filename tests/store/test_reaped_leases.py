"""A lease ended by the reaper stays ended, whatever clock reading a late writer carries.

Issue 17 (3): on PostgreSQL a transaction reads the database clock when it begins; a renewal
that began a moment before the reaper's ``expire_leases_of`` waits for the row lock, then used
to pass ``lease_expires_at > :now`` with its earlier instant — the audit log read
``lease_expired{owner_gone}``, then ``renewed`` *earlier*, then ``succeeded`` by the reaped
owner. Each write is now judged against the row's effective instant (the later of its clock and
the row's ``updated_at``). Two handles on one database with their own injected clocks stand for
the two transactions: the reaper's reading, and the late writer's earlier one.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jobledger
from jobledger.testing import FakeClock

from .helpers import enqueue, make_job, raises_code, types

LOST = "SCHEDULER_LEASE_LOST"
LEASE_MS = 30_000
REAPED_AFTER_MS = 5_000  # the reaper's reading, after the claim
EARLIER_MS = 10  # how much earlier than the reaper's the late writer's reading is


@pytest.fixture
def reaped(store, store_factory, clock, authority):
    """w1's occurrence, its lease ended by a reaper at claim + 5 s; a handle whose clock reads
    10 ms before the reaper's (the late writer's transaction)."""
    make_job(store, authority, "job-a", max_attempts=3)
    enqueue(store, "job-a", clock(), "t")
    claimed = store.claim_next(owner_id="w1", lease_ms=LEASE_MS)
    assert claimed is not None
    reaper = store_factory(clock=FakeClock(clock() + REAPED_AFTER_MS))
    [ended] = reaper.expire_leases_of("w1", reason="owner_gone")
    assert ended.lease_expires_at == clock() + REAPED_AFTER_MS
    late = store_factory(clock=FakeClock(clock() + REAPED_AFTER_MS - EARLIER_MS))
    return claimed, late, reaper


def _audit_never_goes_back(store: jobledger.Store, occurrence_id: str) -> list[str]:
    events = sorted(store.events(occurrence_id=occurrence_id, limit=100), key=lambda e: e.event_id)
    instants = [event.occurred_at for event in events]
    assert instants == sorted(instants), list(zip(types(events), instants, strict=True))
    return types(events)


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda late, o: late.renew(
                occurrence_id=o.id, owner_id="w1", fence=o.fence, lease_ms=LEASE_MS
            ),
            id="renew",
        ),
        pytest.param(
            lambda late, o: late.settle(
                occurrence_id=o.id, owner_id="w1", fence=o.fence, outcome="succeeded"
            ),
            id="settle",
        ),
        pytest.param(
            lambda late, o: late.release_lease(
                occurrence_id=o.id, owner_id="w1", fence=o.fence, reason="shutdown"
            ),
            id="release",
        ),
    ],
)
def test_a_write_that_read_an_earlier_clock_than_the_reaper_is_lease_lost(
    store,
    reaped,
    write: Callable[[jobledger.Store, jobledger.Occurrence], object],
):
    claimed, late, _ = reaped
    with raises_code(LOST):
        write(late, claimed)
    after = store.get_occurrence(claimed.id)
    assert (after.status, after.lease_owner, after.fence) == ("running", "w1", claimed.fence)
    assert after.lease_expires_at == after.updated_at  # still ended
    trail = _audit_never_goes_back(store, claimed.id)
    assert trail[-1] == "occurrence_lease_expired"


def test_a_renewal_batch_that_read_an_earlier_clock_is_lease_lost(store, reaped):
    claimed, late, _ = reaped
    [outcome] = late.renew_batch(
        [
            jobledger.Renewal(
                occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, lease_ms=LEASE_MS
            )
        ]
    )
    assert isinstance(outcome, jobledger.LeaseLost)


def test_the_reaped_occurrence_is_taken_over_and_the_late_writer_stays_out(store, clock, reaped):
    claimed, late, reaper = reaped
    taken = reaper.claim_next(owner_id="w2", lease_ms=LEASE_MS)
    assert taken is not None and taken.id == claimed.id and taken.reclaimed
    assert taken.fence == claimed.fence + 1
    assert taken.lease_expires_at == clock() + REAPED_AFTER_MS + LEASE_MS
    with raises_code(LOST):
        late.settle(
            occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, outcome="succeeded"
        )
    # The new holder's own writes, even from the late handle, never go back before the takeover.
    renewed = late.renew(occurrence_id=taken.id, owner_id="w2", fence=taken.fence, lease_ms=1)
    assert renewed.updated_at == clock() + REAPED_AFTER_MS
    trail = _audit_never_goes_back(store, claimed.id)
    assert trail[-3:] == ["occurrence_lease_expired", "occurrence_reclaimed", "occurrence_renewed"]
