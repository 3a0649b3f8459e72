"""Deploys and operators without losing work (SPEC §14): what a job update does to live
occurrences, requeue after a change, requeue vs adjudication, and flows after a fix."""

from __future__ import annotations

from typing import Any

import pytest

import jobledger
from jobledger import EnqueueRequest, Store

from .helpers import LEASE_MS, claim, dead_letter, enqueue, fail, make_job, raises_code, succeed


def _update(store: Store, job_id: str, **patch: Any):
    job = store.get_job(job_id)
    assert job is not None
    return store.update_job(job_id, expected_revision=job.revision, patch=patch)


@pytest.mark.parametrize(
    "patch",
    [
        {"max_attempts": 5},
        {"payload": {"v": 2}},
        {"trigger": {"every": "1h"}},
        {"on_lost_lease": "adjudicate"},
        {"queue": "other", "priority": 3},
    ],
    ids=["max_attempts", "payload", "trigger", "on_lost_lease", "queue"],
)
def test_only_kind_and_authority_make_live_work_stale(store, clock, authority, patch):
    make_job(store, authority)
    enqueue(store, "job-a", clock())
    updated = _update(store, "job-a", **patch)
    assert updated.revision == 2
    assert updated.run_revision == 1  # live occurrences (revision 1) are still current
    renamed = _update(store, "job-a", kind="email-v2")
    assert renamed.run_revision == 3  # a new kind binds: revision-1 work is stale
    _update(store, "job-a", kind="email")
    moved = _update(store, "job-a", authority={**authority, "workspaceId": "w-2"})
    assert moved.run_revision == moved.revision


def test_a_new_max_attempts_follows_live_occurrences_never_below_what_is_spent(
    store, clock, authority
):
    make_job(store, authority, max_attempts=3)
    queued = enqueue(store, "job-a", clock(), "queued")
    waiting = enqueue(store, "job-a", clock(), "waiting")
    running = enqueue(store, "job-a", clock(), "running")
    first = store.claim_occurrence(occurrence_id=waiting.id, owner_id="w1", lease_ms=LEASE_MS)
    fail(store, first, retry_at=clock() + 60_000, error={"code": "flaky"})  # retry_wait, 1 spent
    for _ in range(2):  # the running one is at its 2nd attempt
        clock.advance(1)
        held = store.claim_occurrence(occurrence_id=running.id, owner_id="w1", lease_ms=LEASE_MS)
        assert held is not None
        if held.attempt == 1:
            fail(store, held, retry_at=clock(), error={"code": "flaky"})

    _update(store, "job-a", max_attempts=5)
    assert [store.get_occurrence(o.id).max_attempts for o in (queued, waiting, running)] == [5] * 3

    _update(store, "job-a", max_attempts=1)
    # queued: nothing spent → 1; waiting (1 spent) keeps the attempt it waits for → 2;
    # running (its 2nd attempt) → this attempt is its last → 2.
    got = [store.get_occurrence(o.id) for o in (queued, waiting, running)]
    assert [(o.status, o.attempt, o.max_attempts) for o in got] == [
        ("queued", 0, 1),
        ("retry_wait", 1, 2),
        ("running", 2, 2),
    ]
    # A failure of the running attempt is now final: it does not come back.
    final = fail(store, got[2], retry_at=clock(), error={"code": "flaky"})
    assert final.status == "dead_letter"


def test_a_requeued_dead_letter_keeps_its_grant_when_the_job_changes(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock, max_attempts=3)
    store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=1, reason="r", actor="ops")
    _update(store, "job-a", max_attempts=10)
    assert store.get_occurrence(dead.id).max_attempts == 2  # attempt + 1, the operator's grant


def test_requeue_binds_a_stale_dead_letter_to_the_jobs_current_revision(store, clock, authority):
    dead = dead_letter(store, authority, "job-a", clock)
    assert dead.job_revision == 1
    _update(store, "job-a", kind="email-v2")  # revision 2 makes revision-1 work stale
    requeued = store.requeue_dead_letter(
        occurrence_id=dead.id, expected_fence=1, reason="deployed v2", actor="ops:alice"
    )
    assert (requeued.job_revision, requeued.kind) == (2, "email-v2")
    event = store.history(occurrence_id=dead.id)[0]
    assert event.type == "occurrence_requeued"
    assert (event.data["previousJobRevision"], event.data["jobRevision"]) == (1, 2)
    [audit] = [e for e in store.audit_log(limit=10) if e.action == "occurrence_requeued"]
    assert (audit.data["previousJobRevision"], audit.data["jobRevision"]) == (1, 2)
    # A current dead letter is not rebound: its event says nothing about revisions.
    other = enqueue(store, "job-a", clock(), "fresh")
    held = store.claim_occurrence(occurrence_id=other.id, owner_id="w1", lease_ms=LEASE_MS)
    fail(store, held, retryable=False, error={"code": "boom"})
    store.requeue_dead_letter(occurrence_id=other.id, expected_fence=1, reason="r", actor="ops")
    assert "jobRevision" not in store.history(occurrence_id=other.id)[0].data


def _outcome_unknown(store: Store, clock, authority):
    make_job(store, authority, on_lost_lease="adjudicate")
    occurrence = enqueue(store, "job-a", clock())
    held = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w1", lease_ms=LEASE_MS)
    return fail(
        store,
        held,
        retryable=False,
        error={"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "the worker died mid-call"},
    )


def test_requeue_of_an_outcome_unknown_dead_letter_needs_adjudication(store, clock, authority):
    dead = _outcome_unknown(store, clock, authority)
    before = store.history(occurrence_id=dead.id)
    with raises_code("SCHEDULER_REQUEUE_NEEDS_ADJUDICATION") as info:
        store.requeue_dead_letter(occurrence_id=dead.id, expected_fence=1, reason="r", actor="a")
    assert "jobledger adjudicate" in str(info.value)
    assert info.value.details["errorCode"] == "SCHEDULER_OUTCOME_UNKNOWN"
    assert store.get_occurrence(dead.id).status == "dead_letter"
    assert store.history(occurrence_id=dead.id) == before
    requeued = store.requeue_dead_letter(
        occurrence_id=dead.id,
        expected_fence=1,
        reason="the provider says it never arrived",
        actor="ops:alice",
        override_adjudication=True,
    )
    assert requeued.status == "retry_wait"
    assert store.history(occurrence_id=dead.id)[0].data["overrideAdjudication"] is True
    [audit] = [e for e in store.audit_log(limit=10) if e.action == "occurrence_requeued"]
    assert audit.actor == "ops:alice"
    assert audit.data["overrideAdjudication"] is True


def test_an_applied_decision_carries_the_handlers_result(store, clock, authority):
    dead = _outcome_unknown(store, clock, authority)
    [child] = store.enqueue_batch([EnqueueRequest("job-a", clock(), "child", after=(dead.id,))])
    case = store.get_adjudication_case(dead.id)
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.adjudicate(
            occurrence_id=dead.id,
            decision="not_applied",
            evidence_digest=case.evidence_digest,
            reason="r",
            actor="ops",
            result={"charge": "ch_1"},
        )
    store.adjudicate(
        occurrence_id=dead.id,
        decision="applied",
        evidence_digest=case.evidence_digest,
        reason="the provider shows the charge",
        actor="ops",
        result={"charge": "ch_1"},
    )
    assert store.get_occurrence(dead.id).result == {"charge": "ch_1"}
    assert [(p.occurrence_id, p.result) for p in store.parent_states(child.id)] == [
        (dead.id, {"charge": "ch_1"})
    ]


# -- flows after a fix ------------------------------------------------------------------------


def _node(store: Store, clock, key: str, after: tuple[str, ...] = (), **options: Any):
    [occurrence] = store.enqueue_batch(
        [EnqueueRequest("job-a", clock(), key, after=after, **options)]
    )
    return occurrence


def _status(store: Store, *occurrences: Any) -> list[str]:
    return [store.get_occurrence(o.id).status for o in occurrences]


def _decline(store: Store, occurrence: Any) -> Any:
    held = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w1", lease_ms=LEASE_MS)
    return fail(store, held, retryable=False, error={"code": "declined"})


def test_requeue_revives_the_flow_its_failure_cancelled(store, clock, authority):
    make_job(store, authority)
    charge = _node(store, clock, "charge")
    ship = _node(store, clock, "ship", (charge.id,))
    receipt = _node(store, clock, "receipt", (charge.id,))
    close = _node(store, clock, "close", (ship.id, receipt.id))
    audit_trail = _node(store, clock, "trail", (charge.id,), on_parent_failure="run")
    other = _node(store, clock, "other")
    by_operator = _node(store, clock, "by-operator", (other.id,))
    store.cancel_occurrence(occurrence_id=by_operator.id, actor="ops", reason="not needed")
    dead = _decline(store, charge)
    assert _status(store, ship, receipt, close) == ["cancelled"] * 3
    assert _status(store, audit_trail) == ["queued"]  # "run": it counted the failure

    requeued = store.requeue_dead_letter(
        occurrence_id=charge.id,
        expected_fence=dead.fence,
        reason="card updated",
        actor="ops:alice",
        revive_children=True,
    )
    assert requeued.status == "retry_wait"
    assert _status(store, ship, receipt, close) == ["blocked"] * 3
    assert _status(store, by_operator) == ["cancelled"]  # not cancelled because of charge
    event = store.history(occurrence_id=charge.id)[0]
    assert sorted(event.data["revived"]) == sorted([ship.id, receipt.id, close.id])
    revived = store.history(occurrence_id=close.id)[0]
    assert revived.type == "occurrence_revived"
    assert revived.data["actor"] == "ops:alice"
    assert revived.data["requeued"] == charge.id
    # Their keys return the revived occurrences.
    [again] = store.enqueue_batch([EnqueueRequest("job-a", clock(), "ship", after=(charge.id,))])
    assert (again.id, again.status) == (ship.id, "blocked")

    # The flow follows the parent's new run to the end.
    _run(store, charge, {"paid": True})
    assert _status(store, ship, receipt, close) == ["queued", "queued", "blocked"]
    _run(store, ship)
    _run(store, receipt)
    assert _status(store, close) == ["queued"]
    _run(store, close)
    assert _status(store, charge, ship, receipt, close) == ["succeeded"] * 4


def _run(store: Store, occurrence: Any, result: Any = None) -> Any:
    held = store.claim_occurrence(occurrence_id=occurrence.id, owner_id="w2", lease_ms=LEASE_MS)
    assert held is not None, f"{occurrence.id} is not claimable"
    return succeed(store, held, result)


def test_without_revive_children_a_requeue_leaves_the_flow_cancelled(store, clock, authority):
    make_job(store, authority)
    charge = _node(store, clock, "charge")
    ship = _node(store, clock, "ship", (charge.id,))
    dead = _decline(store, charge)
    store.requeue_dead_letter(
        occurrence_id=charge.id, expected_fence=dead.fence, reason="r", actor="a"
    )
    succeed(store, claim(store))
    assert _status(store, ship) == ["cancelled"]


def test_revived_run_children_wait_for_the_parents_new_outcome(store, clock, authority):
    make_job(store, authority)
    first = _node(store, clock, "first")
    second = _node(store, clock, "second")
    both = _node(store, clock, "both", (first.id, second.id), on_parent_failure="run")
    dead = _decline(store, first)
    assert _status(store, both) == ["blocked"]  # still waits for second
    store.requeue_dead_letter(
        occurrence_id=first.id,
        expected_fence=dead.fence,
        reason="r",
        actor="a",
        revive_children=True,
    )
    succeed(store, store.claim_occurrence(occurrence_id=second.id, owner_id="w", lease_ms=LEASE_MS))
    assert _status(store, both) == ["blocked"]  # first runs again: it waits for it
    succeed(store, store.claim_occurrence(occurrence_id=first.id, owner_id="w", lease_ms=LEASE_MS))
    assert _status(store, both) == ["queued"]


def test_a_child_with_another_failed_parent_is_not_revived(store, clock, authority):
    make_job(store, authority)
    first = _node(store, clock, "first")
    second = _node(store, clock, "second")
    child = _node(store, clock, "child", (first.id, second.id))
    dead = _decline(store, first)
    _decline(store, second)
    assert _status(store, child) == ["cancelled"]
    store.requeue_dead_letter(
        occurrence_id=first.id,
        expected_fence=dead.fence,
        reason="r",
        actor="a",
        revive_children=True,
    )
    assert _status(store, child) == ["cancelled"]


@pytest.mark.parametrize("declared", ["0", True, 3, ["kind"]])
def test_a_declaration_that_is_not_a_mapping_is_refused(store, clock, authority, declared):
    """Found by the store fuzzer: update_job(declared=...) raised a TypeError/ValueError."""
    job = make_job(store, authority)
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.update_job(job.id, expected_revision=1, patch={"payload": 1}, declared=declared)
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.record_job_declaration(job.id, expected_revision=1, declared=declared)
    with raises_code("SCHEDULER_INVALID_ARGUMENT"):
        store.declare_queue(
            jobledger.Queue(name="q"), actor="a", source="operator", fields=declared
        )
    assert store.get_job(job.id).revision == 1
    assert store.get_queue("q") is None
