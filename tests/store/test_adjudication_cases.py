"""Every outcome-unknown dead letter is a case of its own, listed and decidable (issue 30, item 6).

A case is one lost attempt (the occurrence and that attempt's fence). Before, the decision table
was keyed by occurrence alone: a re-run granted by ``not_applied`` whose worker was lost again
was an outcome-unknown dead letter that no listing showed (``adjudication_cases`` skipped any
occurrence with a decision), that ``adjudicate`` refused (``ADJUDICATION_ALREADY_RECORDED``), and
whose ``after=`` children stayed blocked forever. Each case also says when its handler began.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger import EnqueueRequest

from .helpers import enqueue, make_job, raises_code

LEASE_MS = 10_000
UNKNOWN = {"code": "SCHEDULER_OUTCOME_UNKNOWN", "message": "the worker was lost"}


def _lose(store: jobledger.Store, clock, how: str) -> jobledger.Occurrence:
    """Claim the payment (its handler starts at once) and lose the attempt: its worker dies and
    the lease expires (``expired``), or its handler says it cannot know (``raised``)."""
    claimed = store.claim_next(owner_id="w1", lease_ms=LEASE_MS, kinds=["pay"])
    assert claimed is not None and claimed.started_at == clock()
    if how == "expired":
        clock.advance(timedelta(milliseconds=LEASE_MS + 1))
        assert store.claim_next(owner_id="w2", lease_ms=LEASE_MS, kinds=["other"]) is None
    else:
        store.settle(
            occurrence_id=claimed.id,
            owner_id="w1",
            fence=claimed.fence,
            outcome="failed",
            error=UNKNOWN,
            retryable=False,
        )
    lost = store.get_occurrence(claimed.id)
    assert lost is not None and lost.status == "dead_letter"
    return lost


def _decide(store: jobledger.Store, case: jobledger.AdjudicationCase, decision: str):
    assert case.evidence_digest is not None
    return store.adjudicate(
        occurrence_id=case.occurrence_id,
        decision=decision,
        evidence_digest=case.evidence_digest,
        reason=f"checked: {decision}",
        actor="ops",
    )


@pytest.fixture
def payment(store, authority, clock):
    """A payment (``on_lost_lease="adjudicate"``) and a receipt that runs after it."""
    make_job(store, authority, "pay", kind="pay", on_lost_lease="adjudicate", max_attempts=1)
    make_job(store, authority, "receipt", kind="receipt")
    parent = enqueue(store, "pay", clock(), "p")
    [child] = store.enqueue_batch(
        [
            EnqueueRequest(
                job_id="receipt", scheduled_for=clock(), trigger_key="r", after=(parent.id,)
            )
        ]
    )
    assert child.status == "blocked"
    return parent, child


@pytest.mark.parametrize("how", ["expired", "raised"])
def test_a_rerun_lost_again_is_a_new_case_listed_decidable_and_it_frees_the_children(
    store, payment, clock, how
):
    parent, child = payment
    first = _lose(store, clock, how)
    [case] = store.adjudication_cases()
    assert (case.occurrence_id, case.fence, case.eligible) == (parent.id, first.fence, True)
    assert case.started_at == first.started_at and case.previous == ()
    _decide(store, case, "not_applied")
    assert store.adjudication_cases() == []

    clock.advance(timedelta(seconds=5))
    second = _lose(store, clock, how)  # the granted re-run is lost too
    assert second.fence == first.fence + 1
    [again] = store.adjudication_cases()
    assert (again.occurrence_id, again.fence, again.attempt) == (parent.id, second.fence, 2)
    assert again.eligible and again.adjudication is None
    assert again.started_at == second.started_at != first.started_at
    assert [d.expected_fence for d in again.previous] == [first.fence]
    assert store.get_adjudication_case(parent.id) == again
    assert store.get_occurrence(child.id).status == "blocked"

    decided = _decide(store, again, "applied")
    assert decided.adjudication is not None and decided.adjudication.decision == "applied"
    assert decided.adjudication.expected_fence == second.fence
    assert decided.adjudication.started_at == second.started_at
    # The earlier decision's granted run ended in this case: recorded on it.
    [earlier] = decided.previous
    assert (earlier.decision, earlier.status) == ("not_applied", "applied")
    assert earlier.retry_outcome["status"] == "dead_letter"
    assert earlier.retry_outcome["error"]["code"] == "SCHEDULER_OUTCOME_UNKNOWN"
    assert earlier.retry_settled_at == second.settled_at
    assert store.get_occurrence(parent.id).status == "succeeded"
    assert store.get_occurrence(child.id).status == "queued"  # applied: the receipt runs
    assert store.adjudication_cases() == []


def test_a_case_takes_one_decision_however_many_came_before(store, payment, clock):
    parent, _ = payment
    _lose(store, clock, "raised")
    _decide(store, store.adjudication_cases()[0], "not_applied")
    _lose(store, clock, "raised")
    case = store.adjudication_cases()[0]
    _decide(store, case, "not_applied")
    with raises_code("SCHEDULER_ADJUDICATION_ALREADY_RECORDED"):
        _decide(store, case, "applied")
    # The third run succeeds: the latest decision's granted run is its outcome.
    rerun = store.claim_next(owner_id="w1", lease_ms=LEASE_MS, kinds=["pay"])
    assert rerun is not None and rerun.attempt == 3
    store.settle(occurrence_id=parent.id, owner_id="w1", fence=rerun.fence, outcome="succeeded")
    shown = store.get_adjudication_case(parent.id)
    assert shown is not None and not shown.eligible
    assert shown.adjudication is not None and shown.adjudication.status == "applied"
    assert shown.adjudication.retry_outcome["status"] == "succeeded"
    assert [d.decision for d in shown.previous] == ["not_applied"]
    with raises_code("SCHEDULER_ADJUDICATION_ALREADY_RECORDED"):
        _decide(store, case, "applied")


def test_not_applied_twice_then_a_failure_cancels_the_children(store, payment, clock):
    parent, child = payment
    _lose(store, clock, "expired")
    _decide(store, store.adjudication_cases()[0], "not_applied")
    _lose(store, clock, "expired")
    _decide(store, store.adjudication_cases()[0], "not_applied")
    rerun = store.claim_next(owner_id="w1", lease_ms=LEASE_MS, kinds=["pay"])
    assert rerun is not None
    store.settle(
        occurrence_id=parent.id,
        owner_id="w1",
        fence=rerun.fence,
        outcome="failed",
        error={"code": "declined", "message": "card declined"},
        retryable=False,
    )
    assert store.get_occurrence(child.id).status == "cancelled"  # on_parent_failure="cancel"
    assert store.adjudication_cases() == []
