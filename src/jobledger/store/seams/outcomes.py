"""The Store protocol's operations on outcomes (SPEC §9): reading results, and adjudicating
occurrences whose outcome is unknown (part of :class:`jobledger.store.base.Store`; the shared
rules are in that module's docstring)."""

from __future__ import annotations

from typing import Any, Protocol

from ...contract import NO_RESULT
from ...models import AdjudicationCase, Occurrence
from ..settle_signal import SettleSignal

__all__ = ["OutcomeSeam"]


class OutcomeSeam(Protocol):
    """Results and outcome-unknown adjudication."""

    @property
    def settle_signal(self) -> SettleSignal:
        """Wakes the waiters of an occurrence that may have become terminal (settled,
        dead-lettered, cancelled, adjudicated ``applied``): a latency hint for result waiters,
        who still poll. On PostgreSQL settles in other processes wake them too
        (LISTEN/NOTIFY with the settled ids)."""
        ...

    def read_result(self, occurrence_id: str) -> Occurrence | None:
        """The occurrence, or ``None`` if there is none. The first read of a succeeded
        occurrence records ``result_read_at``."""
        ...

    def adjudication_cases(self, *, limit: int = 50) -> list[AdjudicationCase]:
        """Eligible cases — dead letters whose last error code ends in ``_OUTCOME_UNKNOWN``,
        without a decision — most recently settled first; at most ``limit`` (≤ 500) of the
        newest 1,000 candidates."""
        ...

    def get_adjudication_case(self, occurrence_id: str) -> AdjudicationCase | None:
        """The case of any occurrence (``eligible`` says whether it may be decided); ``None``
        when the occurrence does not exist."""
        ...

    def adjudicate(
        self,
        *,
        occurrence_id: str,
        decision: str,
        evidence_digest: str,
        reason: str,
        actor: str,
        result: Any = NO_RESULT,
    ) -> AdjudicationCase:
        """Record the one decision (``"applied"`` | ``"not_applied"``) on an eligible case whose
        evidence digest is still ``evidence_digest``, and carry out its meaning in the same
        transaction: ``applied`` settles it succeeded (no handler runs) with ``result`` as its
        result when given (what the handler would have returned; children read it in
        ``ctx.parents``), else ``{"adjudication": "applied", "requestId": …}``; ``not_applied``
        grants exactly one more attempt (a ``result`` with it: ``SCHEDULER_INVALID_ARGUMENT``).
        Appends ``occurrence_adjudication_recorded``. Refusals
        (nothing written): ``SCHEDULER_NOT_FOUND``, ``SCHEDULER_ADJUDICATION_ALREADY_RECORDED``,
        ``_NOT_ELIGIBLE``, ``_EVIDENCE_CONFLICT``, ``_ATTEMPT_LIMIT``."""
        ...
