"""Outcome-unknown adjudication (SPEC §9, upstream §3.7): the case an operator decides, and the
decision once recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .times import UtcTime, UtcTimeOrNone

__all__ = ["Adjudication", "AdjudicationCase", "AdjudicationDecision"]

AdjudicationDecision = Literal["applied", "not_applied"]


@dataclass(frozen=True, slots=True)
class Adjudication:
    """A recorded decision. ``status`` is ``"applied"`` once its effect is complete (at once for
    ``applied``; for ``not_applied`` when the granted run settled — ``retry_outcome`` is then
    that run's status and error — an outcome unknown again when that run was lost too, which
    is a case of its own), ``"pending"`` while the granted run has not settled. One decision per
    case, a case being one lost attempt: ``expected_fence`` names it. ``started_at``: when the
    lost attempt's handler began (``None``: unknown, a case decided before schema v5)."""

    occurrence_id: str
    job_id: str
    request_id: str
    decision: AdjudicationDecision
    evidence_digest: str
    expected_attempt: int
    expected_fence: int
    reason: str
    actor: str
    status: Literal["pending", "applied"]
    created_at: int
    applied_at: int | None
    retry_outcome: Any
    retry_settled_at: int | None
    started_at: int | None = None

    created_time = UtcTime("created_at")
    applied_time = UtcTimeOrNone("applied_at")
    started_time = UtcTimeOrNone("started_at")

    def to_dict(self) -> dict[str, Any]:
        return {
            "occurrenceId": self.occurrence_id,
            "jobId": self.job_id,
            "requestId": self.request_id,
            "decision": self.decision,
            "evidenceDigest": self.evidence_digest,
            "expectedAttempt": self.expected_attempt,
            "expectedFence": self.expected_fence,
            "reason": self.reason,
            "actor": self.actor,
            "status": self.status,
            "createdAt": self.created_at,
            "appliedAt": self.applied_at,
            "retryOutcome": self.retry_outcome,
            "retrySettledAt": self.retry_settled_at,
            "startedAt": self.started_at,
        }


@dataclass(frozen=True, slots=True)
class AdjudicationCase:
    """An attempt whose outcome is unknown, as an operator sees it: one case per lost attempt
    (a re-run granted by ``not_applied`` that is lost again is a new case, ``previous`` holds
    the decisions of the earlier ones, oldest first).

    ``eligible``: a dead letter whose last error code ends in ``_OUTCOME_UNKNOWN`` and whose
    attempt (its ``fence``) has no decision yet. ``started_at``: when that attempt's handler
    began (``None``: unknown — a case from before schema v5); an attempt whose handler never
    began is given back and run again, never made a case. ``evidence_digest`` (``sha256:…``):
    while eligible, the digest of the evidence a decision must name (compare-and-swap: it
    changes whenever the occurrence does); afterwards the digest the decision named.
    ``adjudication``: the decision, once recorded. ``kind``, ``payload`` and ``last_error`` are
    the evidence shown to the operator.
    """

    occurrence_id: str
    job_id: str
    kind: str
    status: str
    attempt: int
    max_attempts: int
    fence: int
    settled_at: int | None
    error_code: str | None
    last_error: Any
    payload: Any
    eligible: bool
    evidence_digest: str | None
    adjudication: Adjudication | None
    started_at: int | None = None
    previous: tuple[Adjudication, ...] = ()

    settled_time = UtcTimeOrNone("settled_at")
    started_time = UtcTimeOrNone("started_at")

    def to_dict(self) -> dict[str, Any]:
        return {
            "occurrenceId": self.occurrence_id,
            "jobId": self.job_id,
            "kind": self.kind,
            "status": self.status,
            "attempt": self.attempt,
            "maxAttempts": self.max_attempts,
            "fence": self.fence,
            "settledAt": self.settled_at,
            "errorCode": self.error_code,
            "lastError": self.last_error,
            "payload": self.payload,
            "eligible": self.eligible,
            "evidenceDigest": self.evidence_digest,
            "adjudication": None if self.adjudication is None else self.adjudication.to_dict(),
            "startedAt": self.started_at,
            "previous": [decision.to_dict() for decision in self.previous],
        }
