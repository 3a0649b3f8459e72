"""Outcome-unknown adjudication (SPEC §9, upstream ``reference/upstream.md`` §3.7).

An occurrence whose worker was lost while its job's ``on_lost_lease`` is ``"adjudicate"``, or
whose handler raised :class:`jobledger.OutcomeUnknown`, is a dead letter with an error code
ending in ``_OUTCOME_UNKNOWN``: nobody knows whether its side effect happened. A case is one
such lost attempt (the occurrence and the fence of that attempt): a re-run granted by
``not_applied`` that is lost again is a new case. An attempt whose handler never began is never
a case (crash recovery gives it back: ``started_at``). A case is *eligible* until an operator
records one decision:

* ``applied`` — the effect happened: in the decision's own transaction the occurrence settles
  ``succeeded`` with result ``{"adjudication": "applied", "requestId": …}``; no handler runs.
* ``not_applied`` — it did not: the occurrence goes back to ``retry_wait`` with exactly one more
  attempt granted (``max_attempts = attempt + 1``); if that run fails it is a dead letter again.

The decision names the case's **evidence digest** (compare-and-swap): a digest of everything the
operator saw (the occurrence's identity, status, attempt, fence, payload and authority digests,
last error, settle instant). If the occurrence changed since, the decision is refused with
``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT`` and nothing is written. A second decision on the
same case is ``SCHEDULER_ADJUDICATION_ALREADY_RECORDED``. The decision row (keyed by occurrence
and fence, with when the lost attempt's handler began) and the event
``occurrence_adjudication_recorded`` are written in the same transaction as its effect.

The decision row's ``status`` column is ``applied`` at once for an ``applied`` decision and stays
``pending`` for ``not_applied``; the granted run's outcome is read from the occurrence itself
(:attr:`Adjudication.retry_outcome`), so settling it costs the hot settle path nothing; when
that run was lost too, the decision on the new case records the earlier one's outcome.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ... import contract
from ...errors import AdjudicationConflict, InvalidArgument, NotFound
from ...models import MAX_CASES, Adjudication, AdjudicationCase
from .. import common, rows
from ..tx import Row, Tx
from . import dependencies
from .base import OperationsBase, required

__all__ = [
    "AdjudicationOperations",
    "awaits_adjudication",
    "evidence_digest_for",
    "payload_digest",
]

_DIGEST = re.compile(r"^sha256:[a-f0-9]{64}$")
# Upstream's bounds: how many dead letters one listing scans, and the reason's size.
MAX_CASE_SCAN = 1000
MAX_REASON_BYTES = 4000


def payload_digest(value: Any) -> str:
    """``sha256:<hex>`` of a value's canonical JSON (upstream's payload digest)."""
    text = contract.encode_trusted_json(value)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json(encoded: object, what: str) -> Any:
    return None if encoded is None else rows.read_stored_json(encoded, what)


def _error_code(error: Any) -> str | None:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def error_code_of(row: Row) -> str | None:
    """The ``code`` of an occurrence row's stored error, if it has one."""
    return _error_code(_json(row["last_error_json"], "occurrence error"))


def evidence_digest_for(row: Row, authority: dict[str, Any]) -> str:
    """The digest a decision must name: upstream's evidence shape, ``reservation: null``."""
    last_error = _json(row["last_error_json"], "occurrence error")
    return payload_digest(
        {
            "schemaVersion": 1,
            "occurrence": {
                "id": row["occurrence_id"],
                "jobId": row["job_id"],
                "jobRevision": int(row["job_revision"]),
                "idempotencyKey": rows.idempotency_key_of(row["occurrence_id"]),
                "triggerKey": row["trigger_key"],
                "scheduledFor": int(row["scheduled_for"]),
                "status": row["status"],
                "attempt": int(row["attempt"]),
                "maxAttempts": int(row["max_attempts"]),
                "fence": int(row["fence"]),
                "authorityDigest": payload_digest(authority),
                "payloadDigest": payload_digest(
                    rows.read_stored_json(row["payload_json"], "occurrence payload")
                ),
                "lastError": last_error,
                "settledAt": None if row["settled_at"] is None else int(row["settled_at"]),
            },
            "reservation": None,
        }
    )


def _eligible(row: Row) -> bool:
    if row["status"] != "dead_letter" or row["last_error_json"] is None:
        return False
    return common.is_outcome_unknown(_json(row["last_error_json"], "occurrence error"))


def awaits_adjudication(tx: Tx, row: Row) -> bool:
    """True when ``row`` is an outcome-unknown dead letter with no decision recorded: a plain
    requeue would run its side effect again without anyone deciding it did not happen (SPEC
    §9), so :meth:`requeue_dead_letter` refuses it unless the operator overrides."""
    if not _eligible(row):
        return False
    fence = int(row["fence"])
    decisions = tx.all("adjudications_of", {"occurrence_id": row["occurrence_id"]})
    return all(int(decision["expected_fence"]) != fence for decision in decisions)


def _reason(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument("reason must be a non-empty string", details={"field": "reason"})
    text = contract.scalar_text(value.strip(), "reason")
    if len(text.encode("utf-8")) > MAX_REASON_BYTES:
        raise InvalidArgument(
            f"reason must be at most {MAX_REASON_BYTES} UTF-8 bytes", details={"field": "reason"}
        )
    return text


def _decision(value: object) -> str:
    if value not in contract.ADJUDICATION_DECISIONS:
        raise InvalidArgument(
            "decision must be 'applied' or 'not_applied'", details={"field": "decision"}
        )
    return str(value)


class AdjudicationOperations(OperationsBase):
    """Cases of unknown outcome and the one decision each may receive."""

    def _adjudication(self, row: Row | None, occurrence: Row) -> Adjudication | None:
        if row is None:
            return None
        status = row["status"]
        retry_outcome = _json(row["retry_outcome_json"], "retry outcome")
        retry_settled_at = row["retry_settled_at"]
        created_at = int(row["created_at"])
        settled_at = occurrence["settled_at"]
        # The granted run of a not_applied decision settled: its outcome, from the occurrence.
        if (
            row["decision"] == "not_applied"
            and status == "pending"
            and occurrence["status"] in contract.TERMINAL_STATUSES
            and settled_at is not None
            and int(settled_at) >= created_at
        ):
            status = "applied"
            retry_settled_at = int(settled_at)
            retry_outcome = {
                "status": occurrence["status"],
                "error": _json(occurrence["last_error_json"], "error"),
            }
        return Adjudication(
            occurrence_id=row["occurrence_id"],
            job_id=row["job_id"],
            request_id=row["request_id"],
            decision=row["decision"],
            evidence_digest=row["evidence_digest"],
            expected_attempt=int(row["expected_attempt"]),
            expected_fence=int(row["expected_fence"]),
            reason=row["reason"],
            actor=row["actor"],
            status=status,
            created_at=created_at,
            applied_at=(
                retry_settled_at
                if row["applied_at"] is None and status == "applied"
                else row["applied_at"]
            ),
            retry_outcome=retry_outcome,
            retry_settled_at=None if retry_settled_at is None else int(retry_settled_at),
            started_at=None if row["started_at"] is None else int(row["started_at"]),
        )

    def _case(self, tx: Tx, row: Row) -> AdjudicationCase:
        """The occurrence's case: its open one (an outcome-unknown dead letter whose attempt has
        no decision), else its latest decided one; ``previous``: the decisions before."""
        decisions = [
            decision
            for found in tx.all("adjudications_of", {"occurrence_id": row["occurrence_id"]})
            if (decision := self._adjudication(found, row)) is not None
        ]
        fence = int(row["fence"])
        eligible = _eligible(row) and all(d.expected_fence != fence for d in decisions)
        adjudication = None if eligible or not decisions else decisions[-1]
        previous = tuple(decisions if adjudication is None else decisions[:-1])
        authority = self._authority_of(tx, [int(row["authority_id"])])[int(row["authority_id"])]
        last_error = _json(row["last_error_json"], "occurrence error")
        digest = (
            evidence_digest_for(row, authority)
            if eligible
            else None
            if adjudication is None
            else adjudication.evidence_digest
        )
        return AdjudicationCase(
            occurrence_id=row["occurrence_id"],
            job_id=row["job_id"],
            kind=row["kind"],
            status=row["status"],
            attempt=int(row["attempt"]),
            max_attempts=int(row["max_attempts"]),
            fence=int(row["fence"]),
            settled_at=None if row["settled_at"] is None else int(row["settled_at"]),
            error_code=_error_code(last_error),
            last_error=last_error,
            payload=rows.read_stored_json(row["payload_json"], "occurrence payload"),
            eligible=eligible,
            evidence_digest=digest,
            adjudication=adjudication,
            started_at=(
                (None if row["started_at"] is None else int(row["started_at"]))
                if adjudication is None
                else adjudication.started_at
            ),
            previous=previous,
        )

    def adjudication_cases(self, *, limit: int = 50) -> list[AdjudicationCase]:
        """Eligible cases, most recently settled first (scans at most 1,000 candidates)."""
        self._assert_open()
        size = contract.normalize_positive_int(limit, "limit")
        if size > MAX_CASES:
            raise InvalidArgument(f"limit must be at most {MAX_CASES}")

        def body(tx: Tx) -> list[AdjudicationCase]:
            found = tx.all(
                "adjudication_candidates",
                {"limit": MAX_CASE_SCAN},
            )
            eligible = [row for row in found if _eligible(row)]
            eligible.sort(key=lambda row: (-int(row["settled_at"] or 0), row["occurrence_id"]))
            del eligible[size:]
            return [self._case(tx, row) for row in eligible]

        return self._read(body)

    def get_adjudication_case(self, occurrence_id: str) -> AdjudicationCase | None:
        """The case of ``occurrence_id`` (eligible or not, decided or not); ``None`` if missing."""
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")

        def body(tx: Tx) -> AdjudicationCase | None:
            row = self._occurrence_row(tx, key)
            return None if row is None else self._case(tx, row)

        return self._read(body)

    def adjudicate(
        self,
        *,
        occurrence_id: str,
        decision: str,
        evidence_digest: str,
        reason: str,
        actor: str,
        result: Any = contract.NO_RESULT,
    ) -> AdjudicationCase:
        """Record the one decision on an eligible case and carry out its meaning (see the
        module docstring). An ``applied`` decision may carry ``result``, the value the handler
        would have returned: the occurrence's result (what its children read in
        ``ctx.parents``); without it the result is ``{"adjudication": "applied", "requestId":
        …}``. A ``result`` with ``not_applied`` is ``SCHEDULER_INVALID_ARGUMENT``. Refusals,
        nothing written: ``SCHEDULER_NOT_FOUND``,
        ``SCHEDULER_ADJUDICATION_ALREADY_RECORDED`` ``{requestId}``,
        ``SCHEDULER_ADJUDICATION_NOT_ELIGIBLE`` ``{status, errorCode}``,
        ``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT`` ``{actualEvidenceDigest, actualAttempt,
        actualFence}``, ``SCHEDULER_ADJUDICATION_ATTEMPT_LIMIT`` (``not_applied`` past 32
        attempts)."""
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        chosen = _decision(decision)
        if not isinstance(evidence_digest, str) or not _DIGEST.match(evidence_digest):
            raise InvalidArgument(
                "evidence_digest must be a sha256 payload digest",
                details={"field": "evidence_digest"},
            )
        why = _reason(reason)
        who = contract.normalize_identifier(actor, "actor")
        given_result = result is not contract.NO_RESULT
        if given_result and chosen != "applied":
            raise InvalidArgument(
                "result applies only to an 'applied' decision", details={"field": "result"}
            )
        result_json = contract.canonical_json(result, "result") if given_result else None
        reason_digest = payload_digest(why)
        request_id = "adjudication-" + payload_digest(
            {
                "schemaVersion": 1,
                "occurrenceId": key,
                "decision": chosen,
                "evidenceDigest": evidence_digest,
                "reasonDigest": reason_digest,
            }
        ).removeprefix("sha256:")

        def body(tx: Tx) -> AdjudicationCase:
            now = tx.now()
            row = self._occurrence_row(tx, key)
            if row is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            fence = int(row["fence"])
            decisions = tx.all("adjudications_of", {"occurrence_id": key})
            # A decision on this lost attempt (its fence) — or, when the occurrence is no case
            # now, the latest decision: the case the caller means was decided.
            decided = next((d for d in decisions if int(d["expected_fence"]) == fence), None)
            if decided is None and decisions and not _eligible(row):
                decided = decisions[-1]
            if decided is not None:
                raise AdjudicationConflict(
                    f"Occurrence {key} was already adjudicated",
                    code="SCHEDULER_ADJUDICATION_ALREADY_RECORDED",
                    details={"requestId": decided["request_id"]},
                )
            if not _eligible(row):
                last_error = _json(row["last_error_json"], "occurrence error")
                raise AdjudicationConflict(
                    f"Occurrence {key} is not an outcome-unknown dead letter",
                    code="SCHEDULER_ADJUDICATION_NOT_ELIGIBLE",
                    details={"status": row["status"], "errorCode": _error_code(last_error)},
                )
            authority = self._authority_of(tx, [int(row["authority_id"])])
            actual = evidence_digest_for(row, authority[int(row["authority_id"])])
            attempt = int(row["attempt"])
            if actual != evidence_digest:
                raise AdjudicationConflict(
                    "The evidence changed since it was read: read the case again",
                    code="SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT",
                    details={
                        "actualEvidenceDigest": actual,
                        "actualAttempt": attempt,
                        "actualFence": fence,
                    },
                )
            if chosen == "not_applied" and attempt + 1 > contract.MAX_JOB_ATTEMPTS:
                raise AdjudicationConflict(
                    f"Occurrence already used {attempt} attempts; one more would pass "
                    f"{contract.MAX_JOB_ATTEMPTS}",
                    code="SCHEDULER_ADJUDICATION_ATTEMPT_LIMIT",
                    details={"attempt": attempt, "maxAttempts": contract.MAX_JOB_ATTEMPTS},
                )
            guard = {"occurrence_id": key, "attempt": attempt, "fence": fence, "now": now}
            if chosen == "applied":
                marker = {"adjudication": "applied", "requestId": request_id}
                changed = tx.one(
                    "adjudicate_applied",
                    {**guard, "result_json": result_json or contract.encode_trusted_json(marker)},
                )
            else:
                changed = tx.one("adjudicate_not_applied", guard)
            if changed is None:
                raise AdjudicationConflict(
                    "The occurrence changed during the adjudication",
                    code="SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT",
                    details={
                        "actualEvidenceDigest": None,
                        "actualAttempt": attempt,
                        "actualFence": fence,
                    },
                )
            at = int(changed["updated_at"])
            if chosen == "applied":  # its effects happened: its blocked children (SPEC §10) go on
                dependencies.decide_children(tx, now, [changed], self.work_signal)
            if decisions:
                # The run an earlier not_applied granted was lost too: this case is its outcome.
                settled_at = None if row["settled_at"] is None else int(row["settled_at"])
                tx.run(
                    "close_adjudications",
                    {
                        "occurrence_id": key,
                        "fence": fence,
                        "settled_at": at if settled_at is None else settled_at,
                        "outcome_json": contract.encode_trusted_json(
                            {
                                "status": row["status"],
                                "error": _json(row["last_error_json"], "occurrence error"),
                            }
                        ),
                    },
                )
            tx.run(
                "insert_adjudication",
                {
                    "occurrence_id": key,
                    "job_id": row["job_id"],
                    "request_id": request_id,
                    "decision": chosen,
                    "evidence_digest": evidence_digest,
                    "expected_attempt": attempt,
                    "expected_fence": fence,
                    "reason": why,
                    "actor": who,
                    "status": "applied" if chosen == "applied" else "pending",
                    "now": at,
                    "applied_at": at if chosen == "applied" else None,
                    "started_at": row["started_at"],
                },
            )
            self._append_event(
                tx,
                job_id=row["job_id"],
                occurrence_id=key,
                event_type="occurrence_adjudication_recorded",
                occurred_at=at,
                fence=fence,
                data={
                    "requestId": request_id,
                    "decision": chosen,
                    "actor": who,
                    "reason": why,
                    "reasonDigest": reason_digest,
                    "evidenceDigest": evidence_digest,
                    "expectedAttempt": attempt,
                    "expectedFence": fence,
                    "retryAttempt": attempt + 1 if chosen == "not_applied" else None,
                    "maxAttempts": int(changed["max_attempts"]),
                    "status": changed["status"],
                    "resultGiven": given_result,
                },
            )
            return self._case(tx, required(self._occurrence_row(tx, key)))

        case = self._write(body)
        if chosen == "not_applied":
            self._after_enqueue()
        else:
            self._after_settle([key])
        return case
