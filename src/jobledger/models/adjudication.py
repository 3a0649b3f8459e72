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
    that run's status and error), ``"pending"`` while the granted run has not settled."""

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

    created_time = UtcTime("created_at")
    applied_time = UtcTimeOrNone("applied_at")

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
        }


@dataclass(frozen=True, slots=True)
class AdjudicationCase:
    """An occurrence whose outcome is unknown, as an operator sees it.

    ``eligible``: a dead letter whose last error code ends in ``_OUTCOME_UNKNOWN`` and that has
    no decision yet. ``evidence_digest`` (``sha256:…``): while eligible, the digest of the
    evidence a decision must name (compare-and-swap: it changes whenever the occurrence does);
    afterwards the digest the decision named. ``adjudication``: the decision, once recorded.
    ``kind``, ``payload`` and ``last_error`` are the evidence shown to the operator.
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

    settled_time = UtcTimeOrNone("settled_at")

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
        }
