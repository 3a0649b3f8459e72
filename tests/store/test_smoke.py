"""A first end-to-end pass through the store: create, enqueue, claim, settle, read history."""

from __future__ import annotations


def test_lifecycle_roundtrip(store, clock, authority):
    job = store.create_job(id="job-a", kind="email", authority=authority, payload={"to": "a"})
    occurrence = store.enqueue_occurrence(job_id=job.id, scheduled_for=clock(), trigger_key="t")
    claimed = store.claim_next(owner_id="w1", lease_ms=1000)
    assert claimed is not None and claimed.id == occurrence.id and claimed.fence == 1
    settled = store.settle(
        occurrence_id=occurrence.id, owner_id="w1", fence=1, outcome="succeeded", result={"ok": 1}
    )
    assert settled.status == "succeeded"
    assert [e.type for e in store.history(occurrence_id=occurrence.id)] == [
        "occurrence_succeeded",
        "occurrence_claimed",
        "occurrence_enqueued",
    ]
