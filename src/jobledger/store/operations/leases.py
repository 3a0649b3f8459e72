"""Leases: claims, renewals, settlement, release, and the operator's requeue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import contract
from ...errors import ClaimConflict, LeaseLost, NotFound, RequeueConflict
from ...models import Occurrence, Settlement
from .. import common
from ..base import Outcome
from ..tx import Row, Tx
from .base import OperationsBase

__all__ = ["LeaseOperations"]


class LeaseOperations(OperationsBase):
    """Leases: claims, renewals, settlement, release, and the operator's requeue."""

    def _dead_letter_expired_leases(self, tx: Tx, now: int) -> None:
        """Lazily dead-letter running occurrences whose *final* attempt's lease expired."""
        expired = tx.all(
            "select_expired_final_leases", {"now": now, "limit": common.LAZY_DEAD_LETTER_BATCH}
        )
        error_json = contract.canonical_json(common.LEASE_EXPIRED_ERROR, "occurrence.error")
        for row in expired:
            changed = tx.run(
                "dead_letter_expired_lease",
                {
                    "occurrence_id": row["occurrence_id"],
                    "owner_id": row["lease_owner"],
                    "fence": row["fence"],
                    "error_json": error_json,
                    "now": now,
                },
            )
            if changed == 1:
                self._append_event(
                    tx,
                    job_id=row["job_id"],
                    occurrence_id=row["occurrence_id"],
                    event_type="occurrence_dead_lettered",
                    occurred_at=now,
                    owner_id=row["lease_owner"],
                    fence=int(row["fence"]),
                    data={
                        "attempt": int(row["attempt"]),
                        "maxAttempts": int(row["max_attempts"]),
                        "reason": "lease_expired",
                    },
                )

    def _apply_claim(
        self, tx: Tx, candidate: Row, *, owner: str, lease_ms: int, now: int, targeted: bool
    ) -> Occurrence:
        expires = common.lease_expiry(now, lease_ms)
        row = tx.one(
            "apply_claim",
            {
                "occurrence_id": candidate["occurrence_id"],
                "expected_fence": candidate["fence"],
                "owner_id": owner,
                "lease_expires_at": expires,
                "now": now,
            },
        )
        if row is None:
            where = "during targeted claim" if targeted else "during claim"
            raise ClaimConflict(f"Occurrence eligibility changed {where}")
        claimed = common.occurrence_from_row(row)
        event_type, data = common.claim_event(
            claimed=claimed,
            previous_status=candidate["status"],
            previous_owner=candidate["lease_owner"],
            targeted=targeted,
        )
        self._append_event(
            tx,
            job_id=claimed.job_id,
            occurrence_id=claimed.id,
            event_type=event_type,
            occurred_at=now,
            owner_id=owner,
            fence=claimed.fence,
            data=data,
        )
        return claimed

    def _claim_one(
        self, tx: Tx, now: int, *, owner: str, lease: int, kind: str | None, workspace: str | None
    ) -> Occurrence | None:
        """claim_next's body: dead-letter expired final leases, then claim the most overdue."""
        self._dead_letter_expired_leases(tx, now)
        candidate = tx.one(
            "claim_next_candidate", {"now": now, "job_kind": kind, "workspace_id": workspace}
        )
        if candidate is None:
            return None
        return self._apply_claim(
            tx, candidate, owner=owner, lease_ms=lease, now=now, targeted=False
        )

    def claim_next(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
    ) -> Occurrence | None:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        kind = common.normalize_optional_identifier(job_kind, "jobKind", 128)
        workspace = common.normalize_optional_identifier(workspace_id, "workspaceId")

        def body(tx: Tx) -> Occurrence | None:
            now = tx.now()
            common.lease_expiry(now, lease)
            return self._claim_one(
                tx, now, owner=owner, lease=lease, kind=kind, workspace=workspace
            )

        return self._write(body)

    def claim_batch(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        limit: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
    ) -> list[Occurrence]:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        count = common.normalize_batch_limit(limit)
        kind = common.normalize_optional_identifier(job_kind, "jobKind", 128)
        workspace = common.normalize_optional_identifier(workspace_id, "workspaceId")

        def body(tx: Tx) -> list[Occurrence]:
            now = tx.now()
            common.lease_expiry(now, lease)
            claimed: list[Occurrence] = []
            # Exactly ``count`` claim_next bodies at one instant, so a batch claims what the same
            # number of claim_next calls would have, in the same order, with the same events.
            while len(claimed) < count:
                occurrence = self._claim_one(
                    tx, now, owner=owner, lease=lease, kind=kind, workspace=workspace
                )
                if occurrence is None:
                    break
                claimed.append(occurrence)
            return claimed

        return self._write(body)

    def claim_occurrence(
        self, *, occurrence_id: str, owner_id: str, lease_ms: int
    ) -> Occurrence | None:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence | None:
            now = tx.now()
            common.lease_expiry(now, lease)
            self._dead_letter_expired_leases(tx, now)
            if self._occurrence_row(tx, key) is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            candidate = tx.one("claim_target_candidate", {"occurrence_id": key, "now": now})
            if candidate is None:
                return None
            return self._apply_claim(
                tx, candidate, owner=owner, lease_ms=lease, now=now, targeted=True
            )

        return self._write(body)

    def renew(self, *, occurrence_id: str, owner_id: str, fence: int, lease_ms: int) -> Occurrence:
        key, owner, token = common.normalize_lease_holder(occurrence_id, owner_id, fence)
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            expires = common.lease_expiry(now, lease)
            row = tx.one(
                "renew_lease",
                {
                    "occurrence_id": key,
                    "owner_id": owner,
                    "fence": token,
                    "lease_expires_at": expires,
                    "now": now,
                },
            )
            if row is None:
                raise common.lease_lost(key)
            renewed = common.occurrence_from_row(row)
            self._append_event(
                tx,
                job_id=renewed.job_id,
                occurrence_id=key,
                event_type="occurrence_renewed",
                occurred_at=now,
                owner_id=owner,
                fence=token,
                data={"leaseExpiresAt": renewed.lease_expires_at},
            )
            return renewed

        return self._write(body)

    def _settle_one(self, tx: Tx, now: int, request: common.SettleRequest) -> Occurrence:
        """settle's body. A lost lease raises before anything is written."""
        key, owner, token = request.occurrence_id, request.owner_id, request.fence
        current = self._occurrence_row(tx, key)
        if (
            current is None
            or current["status"] != "running"
            or current["lease_owner"] != owner
            or current["fence"] != token
            or current["lease_expires_at"] <= now
        ):
            raise common.lease_lost(key)
        plan = common.plan_settle(
            outcome=request.outcome,
            retryable=request.retryable,
            retry_at=request.retry_at,
            result_json=request.result_json,
            error_json=request.error_json,
            attempt=int(current["attempt"]),
            max_attempts=int(current["max_attempts"]),
            available_at=int(current["available_at"]),
            now=now,
        )
        row = tx.one(
            "settle_occurrence",
            {
                "occurrence_id": key,
                "owner_id": owner,
                "fence": token,
                "status": plan.status,
                "available_at": plan.available_at,
                "last_error_json": plan.last_error_json,
                "result_json": plan.result_json,
                "settled_at": plan.settled_at,
                "now": now,
            },
        )
        if row is None:
            raise common.lease_lost(key)
        self._append_event(
            tx,
            job_id=current["job_id"],
            occurrence_id=key,
            event_type=plan.event_type,
            occurred_at=now,
            owner_id=owner,
            fence=token,
            data=plan.event_data,
        )
        return common.occurrence_from_row(row)

    def settle(
        self,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        outcome: Outcome,
        result: Any = None,
        error: Any = None,
        retryable: bool = True,
        retry_at: int | None = None,
    ) -> Occurrence:
        request = common.normalize_settle_request(
            occurrence_id=occurrence_id,
            owner_id=owner_id,
            fence=fence,
            outcome=outcome,
            result=result,
            error=error,
            retryable=retryable,
            retry_at=retry_at,
        )
        return self._write(lambda tx: self._settle_one(tx, tx.now(), request))

    def settle_batch(self, settlements: Sequence[Settlement]) -> list[Occurrence | LeaseLost]:
        requests = common.normalize_settlements(settlements)
        if not requests:
            self._assert_open()
            return []

        def body(tx: Tx) -> list[Occurrence | LeaseLost]:
            now = tx.now()
            settled: list[Occurrence | LeaseLost] = []
            for request in requests:
                try:
                    settled.append(self._settle_one(tx, now, request))
                except LeaseLost as lost:
                    # Fenced out: this one changed nothing, and must not undo the others.
                    settled.append(lost)
            return settled

        return self._write(body)

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        key, owner, token = common.normalize_lease_holder(occurrence_id, owner_id, fence)
        why = contract.normalize_identifier(reason, "reason", max_length=128)

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            row = tx.one(
                "release_lease",
                {"occurrence_id": key, "owner_id": owner, "fence": token, "now": now},
            )
            if row is None:
                raise common.lease_lost(key)
            released = common.occurrence_from_row(row)
            self._append_event(
                tx,
                job_id=released.job_id,
                occurrence_id=key,
                event_type="occurrence_released",
                occurred_at=now,
                owner_id=owner,
                fence=token,
                data={"attempt": released.attempt, "reason": why},
            )
            return released

        occurrence = self._write(body)
        self._after_enqueue()
        return occurrence

    def requeue_dead_letter(
        self, *, occurrence_id: str, expected_fence: int, reason: str, actor: str
    ) -> Occurrence:
        key, fence, why, who = common.normalize_requeue_args(
            occurrence_id=occurrence_id, expected_fence=expected_fence, reason=reason, actor=actor
        )

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            current = self._occurrence_row(tx, key)
            if current is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            if current["status"] != "dead_letter" or current["fence"] != fence:
                raise RequeueConflict(
                    "Dead-letter evidence changed: the occurrence is not a dead letter at the "
                    "expected fence",
                    details={
                        "status": current["status"],
                        "expectedFence": fence,
                        "actualFence": int(current["fence"]),
                    },
                )
            attempt = int(current["attempt"])
            if attempt >= contract.MAX_JOB_ATTEMPTS:
                raise RequeueConflict(
                    f"Occurrence already used {contract.MAX_JOB_ATTEMPTS} attempts, the most an "
                    "occurrence can have; enqueue a new occurrence instead",
                    code="SCHEDULER_REQUEUE_ATTEMPT_LIMIT",
                    details={"attempt": attempt, "maxAttempts": contract.MAX_JOB_ATTEMPTS},
                )
            row = tx.one(
                "requeue_dead_letter",
                {"occurrence_id": key, "expected_fence": fence, "now": now},
            )
            if row is None:
                raise RequeueConflict("Dead letter changed during requeue")
            requeued = common.occurrence_from_row(row)
            record = tx.one(
                "insert_requeue",
                {
                    "occurrence_id": key,
                    "job_id": requeued.job_id,
                    "expected_fence": fence,
                    "attempt": attempt,
                    "previous_max_attempts": int(current["max_attempts"]),
                    "max_attempts": requeued.max_attempts,
                    "previous_error_json": current["last_error_json"],
                    "reason": why,
                    "actor": who,
                    "now": now,
                },
            )
            assert record is not None
            self._append_event(
                tx,
                job_id=requeued.job_id,
                occurrence_id=key,
                event_type="occurrence_requeued",
                occurred_at=now,
                fence=fence,
                data={
                    "actor": who,
                    "reason": why,
                    "requeueId": int(record["requeue_id"]),
                    "attempt": attempt,
                    "previousMaxAttempts": int(current["max_attempts"]),
                    "maxAttempts": requeued.max_attempts,
                },
            )
            return requeued

        occurrence = self._write(body)
        self._after_enqueue()
        return occurrence
