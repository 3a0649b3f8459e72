"""`jobledger occurrence show` and `explain` with dependencies (SPEC §10): a blocked
occurrence lists its parents and their states."""

from __future__ import annotations

from jobledger import EnqueueRequest
from tests.system.cli.conftest import AUTHORITY


def _blocked_child(cli):
    with cli.open() as store:
        store.create_job(id="fetch", kind="k", authority=AUTHORITY)
        store.create_job(id="join", kind="k", authority=AUTHORITY)
        now = store.now()
        a, b = store.enqueue_batch(
            [EnqueueRequest("fetch", now, "a"), EnqueueRequest("fetch", now, "b")]
        )
        claimed = store.claim_occurrence(occurrence_id=a.id, owner_id="w", lease_ms=60_000)
        store.settle(occurrence_id=a.id, owner_id="w", fence=claimed.fence, outcome="succeeded")
        [child] = store.enqueue_batch([EnqueueRequest("join", now, "c", after=(a.id, b.id))])
    return a, b, child


def test_show_lists_the_parents_of_a_blocked_occurrence(cli):
    a, b, child = _blocked_child(cli)
    shown = cli.json("occurrence", "show", child.id)
    assert shown["occurrence"]["status"] == "blocked"
    assert shown["onParentFailure"] == "cancel"
    assert shown["parents"] == [
        {"id": a.id, "jobId": "fetch", "kind": "k", "status": "succeeded"},
        {"id": b.id, "jobId": "fetch", "kind": "k", "status": "queued"},
    ]
    text = cli.ok("occurrence", "show", child.id[:16]).out
    assert "parents:      2 (on failure: cancel)" in text
    assert "waits for 1 of 2 parent(s):" in text
    # the undecided parent first
    assert text.index(f"{b.id} queued") < text.index(f"{a.id} succeeded")
    plain = cli.json("occurrence", "show", a.id)
    assert "parents" not in plain


def test_explain_lists_the_parents_of_a_blocked_newest_occurrence(cli):
    a, b, child = _blocked_child(cli)
    document = cli.json("explain", "join")
    current = document["currentOccurrence"]
    assert current["status"] == "blocked"
    assert current["parents"] == [
        {"id": a.id, "jobId": "fetch", "status": "succeeded"},
        {"id": b.id, "jobId": "fetch", "status": "queued"},
    ]
    text = cli.ok("explain", "join").out
    assert f"current occurrence: {child.id} blocked" in text
    assert f"{b.id} queued (job fetch)" in text
    assert cli.json("explain", "fetch")["currentOccurrence"]["parents"] == []


def test_requeue_revive_children_brings_back_the_flow(cli):
    """Issue 32 item 5: `dead-letter requeue --revive-children` makes the children a failed
    parent cancelled follow it again."""
    from jobledger import EnqueueRequest

    with cli.open() as store:
        store.create_job(
            id="flow", kind="step", authority={"principal": {"type": "user", "id": "t"}}
        )
        [parent] = store.enqueue_batch([EnqueueRequest("flow", store.now(), "charge")])
        [child] = store.enqueue_batch(
            [EnqueueRequest("flow", store.now(), "ship", after=(parent.id,))]
        )
        held = store.claim_occurrence(occurrence_id=parent.id, owner_id="w", lease_ms=60_000)
        assert held is not None
        store.settle(
            occurrence_id=parent.id,
            owner_id="w",
            fence=held.fence,
            outcome="failed",
            error={"code": "declined"},
            retryable=False,
        )
        assert store.get_occurrence(child.id).status == "cancelled"
    done = cli.json(
        "dead-letter", "requeue", parent.id, "--reason", "card updated", "--revive-children"
    )
    assert [o["id"] for o in done["requeued"]] == [parent.id]
    with cli.open() as store:
        assert store.get_occurrence(child.id).status == "blocked"
