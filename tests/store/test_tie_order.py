"""Claim order among equally due occurrences is the reference's (SPEC §2, §7; upstream.md
claimNext): priority first, then the due instant, then ``scheduled_for``, then the occurrence
**id** — never the order of insertion. Every claim path keeps it: claim_next, a batch, a
workspace's lane, and held rows promoted one at a time in a partition-limited queue.

The rows are inserted in *reverse* id order, so insertion order and the reference's order
disagree on every tie."""

from __future__ import annotations

from typing import Any

import jobledger
from jobledger.contract import derive_occurrence_identity

from .helpers import enqueue, make_job, succeed


def _reverse_id_order(store: Any, job_id: str, slot: int, count: int, **options: Any) -> list[str]:
    """Enqueue ``count`` equally due occurrences of ``job_id`` (same slot and due instant, the
    trigger key the only difference) from the largest id to the smallest; their ids in the
    reference's claim order (ascending)."""
    keys = {
        derive_occurrence_identity(
            job_id=job_id, job_revision=1, scheduled_for=slot, trigger_key=f"tie-{n}"
        )[0]: f"tie-{n}"
        for n in range(count)
    }
    for occurrence_id in sorted(keys, reverse=True):
        made = enqueue(store, job_id, slot, keys[occurrence_id], available_at=slot, **options)
        assert made.id == occurrence_id
    return sorted(keys)


def test_claim_next_breaks_ties_by_occurrence_id(store, clock, authority):
    make_job(store, authority, "job-a")
    expected = _reverse_id_order(store, "job-a", clock() - 10, 6)
    got = []
    while (claimed := store.claim_next(owner_id="w", lease_ms=60_000)) is not None:
        got.append(claimed.id)
    assert got == expected


def test_ties_across_lanes_and_batches_follow_the_occurrence_id(store, clock, authority):
    # two kinds (two lanes) of the same priority, merged by the store
    make_job(store, authority, "job-a", kind="email")
    make_job(store, authority, "job-b", kind="sms")
    slot = clock() - 10
    expected = sorted(
        _reverse_id_order(store, "job-a", slot, 4) + _reverse_id_order(store, "job-b", slot, 4)
    )
    got = [o.id for o in store.claim_batch(owner_id="w", lease_ms=60_000, limit=5)]
    got += [o.id for o in store.claim_batch(owner_id="w", lease_ms=60_000, limit=5)]
    assert got == expected


def test_a_workspace_lane_breaks_ties_by_occurrence_id(store, clock, authority):
    make_job(store, {**authority, "workspaceId": "ws-1"}, "job-w")
    expected = _reverse_id_order(store, "job-w", clock() - 10, 5)
    got = []
    while (
        claimed := store.claim_next(owner_id="w", lease_ms=60_000, workspace_id="ws-1")
    ) is not None:
        got.append(claimed.id)
    assert got == expected


def test_held_rows_are_promoted_in_occurrence_id_order(store, clock, authority):
    store.declare_queue(jobledger.Queue("one-at-a-time", partition_concurrency=1), actor="t")
    make_job(store, authority, "job-p", queue="one-at-a-time")
    expected = _reverse_id_order(store, "job-p", clock() - 10, 5, partition="p-1")
    got = []
    while (claimed := store.claim_next(owner_id="w", lease_ms=60_000)) is not None:
        got.append(claimed.id)
        assert store.claim_next(owner_id="w", lease_ms=60_000) is None  # the partition is full
        succeed(store, claimed)
    assert got == expected


def test_priority_and_due_instant_still_come_first(store, clock, authority):
    make_job(store, authority, "job-a")
    now = clock()
    ties = _reverse_id_order(store, "job-a", now - 10, 3)
    urgent = enqueue(store, "job-a", now - 10, "urgent", available_at=now - 10, priority=5)
    earlier = enqueue(store, "job-a", now - 50, "earlier", available_at=now - 20)
    got = []
    while (claimed := store.claim_next(owner_id="w", lease_ms=60_000)) is not None:
        got.append(claimed.id)
    assert got == [urgent.id, earlier.id, *ties]
