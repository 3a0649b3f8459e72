"""Outcome-unknown adjudication (SPEC §9, upstream §3.7) through the App, on both stores."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger.testing import run_until_idle

CODE = "SCHEDULER_OUTCOME_UNKNOWN"
LEASE_MS = 30_000


@pytest.fixture
def charges(app: jobledger.App) -> list[str]:
    calls: list[str] = []

    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> dict[str, str]:
        calls.append(ctx.occurrence.id)
        if ctx.occurrence.payload == "unsure" and calls.count(ctx.occurrence.id) == 1:
            raise jobledger.OutcomeUnknown("the gateway timed out", details={"gateway": "psp"})
        return {"charged": ctx.occurrence.id}

    app.ensure_job("pay", "charge", max_attempts=5)
    return calls


def _lost(app: jobledger.App, clock) -> jobledger.Occurrence:
    """An occurrence whose worker vanished mid-run: claimed, never settled, lease run out."""
    occurrence = app.enqueue("pay", payload="lost")
    claimed = app.store.claim_next(owner_id="gone-worker", lease_ms=LEASE_MS)
    assert claimed is not None and claimed.id == occurrence.id
    clock.advance(timedelta(milliseconds=LEASE_MS))
    return occurrence


def test_a_lost_lease_of_an_adjudicate_kind_becomes_a_case_and_is_never_rerun(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    assert charges == []  # 0 automatic re-runs
    dead = app.get_occurrence(occurrence.id)
    assert dead is not None
    assert (dead.status, dead.last_error["code"]) == ("dead_letter", CODE)
    [case] = app.adjudication_cases()
    assert case.occurrence_id == occurrence.id
    assert (case.eligible, case.error_code, case.attempt, case.fence) == (True, CODE, 1, 1)
    assert case.evidence_digest is not None and case.evidence_digest.startswith("sha256:")
    assert case.adjudication is None
    assert app.get_adjudication_case(occurrence.id) == case
    with pytest.raises(jobledger.JobFailed) as raised:
        app.result(occurrence.id, timeout=timedelta(0))
    assert raised.value.error["code"] == CODE


def test_applied_settles_succeeded_without_calling_the_handler(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    clock.advance(timedelta(seconds=1))
    decided = app.adjudicate(
        occurrence.id,
        decision="applied",
        evidence_digest=case.evidence_digest,
        reason="the PSP shows the charge",
        actor="ops:alice",
    )
    assert decided.eligible is False
    assert decided.status == "succeeded"
    assert decided.adjudication is not None
    assert decided.adjudication.decision == "applied"
    assert decided.adjudication.status == "applied"
    assert decided.adjudication.actor == "ops:alice"
    assert decided.evidence_digest == case.evidence_digest
    request_id = decided.adjudication.request_id
    assert app.result(occurrence.id, timeout=timedelta(0)) == {
        "adjudication": "applied",
        "requestId": request_id,
    }
    clock.advance(timedelta(hours=1))
    run_until_idle(app)
    assert charges == []  # applied never calls the handler
    assert app.adjudication_cases() == []
    event = app.history(occurrence_id=occurrence.id)[0]
    assert event.type == "occurrence_adjudication_recorded"
    assert event.fence == 1
    assert event.data["decision"] == "applied"
    assert event.data["requestId"] == request_id
    assert event.data["evidenceDigest"] == case.evidence_digest
    assert event.data["actor"] == "ops:alice"


def test_not_applied_runs_exactly_once_more(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    decided = app.adjudicate(
        occurrence.id,
        decision="not_applied",
        evidence_digest=case.evidence_digest,
        reason="no charge at the PSP",
    )
    assert decided.status == "retry_wait"
    assert decided.max_attempts == 2
    assert decided.adjudication is not None and decided.adjudication.status == "pending"
    run_until_idle(app)
    run_until_idle(app)
    assert charges == [occurrence.id]  # exactly one more run
    assert app.result(occurrence.id, timeout=timedelta(0)) == {"charged": occurrence.id}
    after = app.get_adjudication_case(occurrence.id)
    assert after is not None and after.adjudication is not None
    assert after.adjudication.status == "applied"
    assert after.adjudication.retry_outcome == {"status": "succeeded", "error": None}


def test_the_granted_run_failing_is_a_dead_letter_again(app, clock):
    runs: list[int] = []

    @app.handler("flaky", on_lost_lease="adjudicate")
    def flaky(ctx: jobledger.JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise jobledger.OutcomeUnknown("timeout")
        raise RuntimeError("still broken")

    app.ensure_job("f", "flaky", max_attempts=5)
    occurrence = app.enqueue("f")
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.eligible and case.evidence_digest
    app.adjudicate(
        occurrence.id, decision="not_applied", evidence_digest=case.evidence_digest, reason="no"
    )
    for _ in range(3):
        run_until_idle(app)
        clock.advance(timedelta(minutes=10))
    assert runs == [1, 2]
    dead = app.get_occurrence(occurrence.id)
    assert dead is not None and dead.status == "dead_letter"
    after = app.get_adjudication_case(occurrence.id)
    assert after is not None and not after.eligible
    assert after.adjudication is not None
    assert after.adjudication.retry_outcome["status"] == "dead_letter"


def test_outcome_unknown_raised_by_a_handler_is_a_case(app, clock, charges):
    occurrence = app.enqueue("pay", payload="unsure")
    run_until_idle(app)
    assert charges == [occurrence.id]
    [case] = app.adjudication_cases()
    assert case.occurrence_id == occurrence.id
    assert case.last_error["message"] == "the gateway timed out"
    assert case.last_error["details"] == {"gateway": "psp"}
    assert case.payload == "unsure"


def test_a_stale_evidence_digest_is_a_conflict_and_changes_nothing(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    stale = "sha256:" + "0" * 64
    with pytest.raises(jobledger.AdjudicationConflict) as raised:
        app.adjudicate(occurrence.id, decision="applied", evidence_digest=stale, reason="yes")
    assert raised.value.code == "SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT"
    assert raised.value.details == {
        "actualEvidenceDigest": case.evidence_digest,
        "actualAttempt": 1,
        "actualFence": 1,
    }
    assert app.get_adjudication_case(occurrence.id) == case
    # Requeued and dead again: the same attempt count, but the evidence moved on.
    app.store.requeue_dead_letter(
        occurrence_id=occurrence.id,
        expected_fence=1,
        reason="retry",
        actor="ops",
        override_adjudication=True,
    )
    assert app.get_adjudication_case(occurrence.id).eligible is False  # type: ignore[union-attr]
    with pytest.raises(jobledger.AdjudicationConflict) as raised:
        app.adjudicate(
            occurrence.id, decision="applied", evidence_digest=case.evidence_digest, reason="x"
        )
    assert raised.value.code == "SCHEDULER_ADJUDICATION_NOT_ELIGIBLE"


def test_a_second_decision_is_refused(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    first = app.adjudicate(
        occurrence.id, decision="applied", evidence_digest=case.evidence_digest, reason="yes"
    )
    assert first.adjudication is not None
    for decision in ("applied", "not_applied"):
        with pytest.raises(jobledger.AdjudicationConflict) as raised:
            app.adjudicate(
                occurrence.id,
                decision=decision,
                evidence_digest=case.evidence_digest,
                reason="again",
            )
        assert raised.value.code == "SCHEDULER_ADJUDICATION_ALREADY_RECORDED"
        assert raised.value.details == {"requestId": first.adjudication.request_id}


def test_bad_decisions_are_refused_before_anything_is_read(app, clock, charges):
    occurrence = _lost(app, clock)
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    digest = case.evidence_digest
    for bad in (
        {"decision": "maybe", "evidence_digest": digest, "reason": "r"},
        {"decision": "applied", "evidence_digest": "abc", "reason": "r"},
        {"decision": "applied", "evidence_digest": digest, "reason": "  "},
        {"decision": "applied", "evidence_digest": digest, "reason": "x" * 4001},
    ):
        with pytest.raises(jobledger.InvalidArgument):
            app.adjudicate(occurrence.id, **bad)
    with pytest.raises(jobledger.NotFound):
        app.adjudicate("occ_missing", decision="applied", evidence_digest=digest, reason="r")
    assert app.get_adjudication_case("occ_missing") is None
    assert app.get_adjudication_case(occurrence.id) == case


def test_a_plain_dead_letter_is_not_eligible(app, clock):
    @app.handler("plain")
    def plain(ctx: jobledger.JobContext) -> None:
        raise jobledger.Fail("no")

    app.ensure_job("x", "plain", max_attempts=1)
    occurrence = app.enqueue("x")
    run_until_idle(app)
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None
    assert (case.eligible, case.evidence_digest, case.error_code) == (
        False,
        None,
        "execution_failed",
    )
    assert app.adjudication_cases() == []
