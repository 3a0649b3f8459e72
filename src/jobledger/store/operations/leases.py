"""Leases: claims, renewals, settlement, release, cancellation and the operator's requeue.

A claim batch is a handful of statements whatever its size: the expired-final-lease sweep once,
one candidate probe per kind (the claim index holds only claimable rows of enabled jobs, so a
probe stops after the rows it takes), one guarded ``UPDATE … RETURNING`` per row and one
multi-row event insert (both pipelined on PostgreSQL). Settles and renewals are guarded
``UPDATE … RETURNING`` statements too: the row decides where an attempt goes, so nothing is
read first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from ... import contract
from ...errors import ClaimConflict, Conflict, LeaseLost, NotFound, RequeueConflict
from ...models import Job, Occurrence, Renewal, Settlement
from .. import common, inputs, rows
from ..base import Outcome
from ..tx import Row, Tx
from .occurrences import OccurrenceOperations

__all__ = ["LeaseOperations"]


def _count_settlement(
    tally: Counter[tuple[int, str, str, str]], now: int, row: Row, owner: str
) -> None:
    tally[(common.minute_of(now), row["kind"], owner, row["status"])] += 1


def _throughput_params(tally: Counter[tuple[int, str, str, str]]) -> list[dict[str, Any]]:
    merged: dict[tuple[int, str, str], dict[str, Any]] = {}
    for (minute, kind, owner, status), count in tally.items():
        entry = merged.setdefault(
            (minute, kind, owner),
            {
                "minute": minute,
                "kind": kind,
                "owner_id": owner,
                "succeeded": 0,
                "retried": 0,
                "dead_lettered": 0,
            },
        )
        column = {"succeeded": "succeeded", "retry_wait": "retried"}.get(status, "dead_lettered")
        entry[column] += count
    return list(merged.values())


class LeaseOperations(OccurrenceOperations):
    """Leases: claims, renewals, settlement, release, cancellation and requeue."""

    # -- claims -----------------------------------------------------------------------------

    def _dead_letter_expired_leases(self, tx: Tx, now: int) -> None:
        """Lazily dead-letter running occurrences whose *final* attempt's lease expired."""
        expired = tx.all(
            "select_expired_final_leases", {"now": now, "limit": common.LAZY_DEAD_LETTER_BATCH}
        )
        if not expired:
            return
        events: list[dict[str, Any]] = []
        tally: Counter[tuple[int, str, str, str]] = Counter()
        for row in expired:
            changed = tx.one(
                "dead_letter_expired_lease",
                {
                    "occurrence_id": row["occurrence_id"],
                    "owner_id": row["lease_owner"],
                    "fence": row["fence"],
                    "error_json": common.LEASE_EXPIRED_ERROR_JSON,
                    "now": now,
                },
            )
            if changed is None:
                continue
            tally[(common.minute_of(now), row["kind"], row["lease_owner"], "dead_letter")] += 1
            events.append(
                common.event_params(
                    job_id=row["job_id"],
                    occurrence_id=row["occurrence_id"],
                    event_type="occurrence_dead_lettered",
                    occurred_at=now,
                    owner_id=row["lease_owner"],
                    fence=int(row["fence"]),
                    data_json=contract.encode_trusted_json(
                        {
                            "attempt": int(row["attempt"]),
                            "maxAttempts": int(row["max_attempts"]),
                            "reason": "lease_expired",
                        }
                    ),
                )
            )
        if events:
            tx.run("insert_events", tx.table(events))
            tx.many("add_throughput", _throughput_params(tally))

    def _claim(
        self,
        tx: Tx,
        now: int,
        *,
        owner: str,
        lease: int,
        kinds: Sequence[str] | None,
        workspace: str | None,
        limit: int,
    ) -> list[Occurrence]:
        """One claim transaction's body: sweep, pick, lease, record, attach the jobs."""
        expires = common.lease_expiry(now, lease)
        self._dead_letter_expired_leases(tx, now)
        if kinds is None:
            if workspace is None:
                found = tx.all("live_kinds")
            else:
                found = tx.all("live_kinds_in_workspace", {"workspace_id": workspace})
            kinds = [row["kind"] for row in found]
            if not kinds:
                return []
        candidates = self._claim_candidates(
            tx, now=now, kinds=kinds, workspace=workspace, limit=limit
        )
        if not candidates:
            return []
        leased = tx.all(
            "apply_claims",
            {
                "ids": tx.id_list([candidate["occurrence_id"] for candidate in candidates]),
                "owner_id": owner,
                "lease_expires_at": expires,
                "now": now,
            },
        )
        by_id = {row["occurrence_id"]: row for row in leased}
        updated = [by_id.get(candidate["occurrence_id"]) for candidate in candidates]
        jobs: dict[str, Job] = {}
        claimed: list[Occurrence] = []
        events: list[dict[str, Any]] = []
        for candidate, row in zip(candidates, updated, strict=True):
            if row is None:
                raise ClaimConflict("Occurrence eligibility changed during claim")
            job_id = row["job_id"]
            job = jobs.get(job_id)
            if job is None:
                job_row = self._job_row(tx, job_id)
                if job_row is not None:
                    job = jobs[job_id] = rows.job_from_row(job_row)
            occurrence = rows.occurrence_from_row(
                row, job=job, reclaimed=candidate["status"] == "running"
            )
            event_type, data_json = common.claim_event_data(
                attempt=occurrence.attempt,
                previous_status=candidate["status"],
                previous_owner=candidate["lease_owner"],
                targeted=False,
            )
            events.append(
                common.event_params(
                    job_id=job_id,
                    occurrence_id=occurrence.id,
                    event_type=event_type,
                    occurred_at=now,
                    owner_id=owner,
                    fence=occurrence.fence,
                    data_json=data_json,
                )
            )
            claimed.append(occurrence)
        tx.run("insert_events", tx.table(events))
        return claimed

    def claim_next(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
    ) -> Occurrence | None:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        wanted = inputs.normalize_kinds(job_kind, kinds)
        workspace = inputs.normalize_optional_identifier(workspace_id, "workspaceId")

        def body(tx: Tx) -> Occurrence | None:
            claimed = self._claim(
                tx, tx.now(), owner=owner, lease=lease, kinds=wanted, workspace=workspace, limit=1
            )
            return claimed[0] if claimed else None

        return self._write(body)

    def claim_batch(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        limit: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
    ) -> list[Occurrence]:
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)
        count = inputs.normalize_batch_limit(limit)
        wanted = inputs.normalize_kinds(job_kind, kinds)
        workspace = inputs.normalize_optional_identifier(workspace_id, "workspaceId")
        return self._write(
            lambda tx: self._claim(
                tx,
                tx.now(),
                owner=owner,
                lease=lease,
                kinds=wanted,
                workspace=workspace,
                limit=count,
            )
        )

    def claim_occurrence(
        self, *, occurrence_id: str, owner_id: str, lease_ms: int
    ) -> Occurrence | None:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence | None:
            now = tx.now()
            expires = common.lease_expiry(now, lease)
            self._dead_letter_expired_leases(tx, now)
            if self._occurrence_row(tx, key) is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            candidate = tx.one("claim_target_candidate", {"occurrence_id": key, "now": now})
            if candidate is None:
                return None
            row = tx.one(
                "apply_claim",
                {
                    "occurrence_id": key,
                    "expected_fence": candidate["fence"],
                    "owner_id": owner,
                    "lease_expires_at": expires,
                    "now": now,
                },
            )
            if row is None:
                raise ClaimConflict("Occurrence eligibility changed during targeted claim")
            job_row = self._job_row(tx, row["job_id"])
            job = None if job_row is None else rows.job_from_row(job_row)
            claimed = rows.occurrence_from_row(
                row, job=job, reclaimed=candidate["status"] == "running"
            )
            event_type, data_json = common.claim_event_data(
                attempt=claimed.attempt,
                previous_status=candidate["status"],
                previous_owner=candidate["lease_owner"],
                targeted=True,
            )
            tx.run(
                "insert_event",
                common.event_params(
                    job_id=claimed.job_id,
                    occurrence_id=key,
                    event_type=event_type,
                    occurred_at=now,
                    owner_id=owner,
                    fence=claimed.fence,
                    data_json=data_json,
                ),
            )
            return claimed

        return self._write(body)

    # -- renewals ---------------------------------------------------------------------------

    def _renew_many(
        self, tx: Tx, now: int, renewals: Sequence[tuple[str, str, int, int]]
    ) -> list[Occurrence | LeaseLost]:
        updated = tx.rows_many(
            "renew_lease",
            [
                {
                    "occurrence_id": key,
                    "owner_id": owner,
                    "fence": fence,
                    "lease_expires_at": common.lease_expiry(now, lease),
                    "now": now,
                }
                for key, owner, fence, lease in renewals
            ],
        )
        results: list[Occurrence | LeaseLost] = []
        events: list[dict[str, Any]] = []
        for (key, owner, fence, _lease), row in zip(renewals, updated, strict=True):
            if row is None:
                results.append(common.lease_lost(key))
                continue
            renewed = rows.occurrence_from_row(row)
            results.append(renewed)
            events.append(
                common.event_params(
                    job_id=renewed.job_id,
                    occurrence_id=key,
                    event_type="occurrence_renewed",
                    occurred_at=now,
                    owner_id=owner,
                    fence=fence,
                    data_json=f'{{"leaseExpiresAt":{renewed.lease_expires_at}}}',
                )
            )
        if events:
            tx.run("insert_events", tx.table(events))
        return results

    def renew(self, *, occurrence_id: str, owner_id: str, fence: int, lease_ms: int) -> Occurrence:
        key, owner, token = inputs.normalize_lease_holder(occurrence_id, owner_id, fence)
        lease = contract.normalize_lease_ms(lease_ms)

        def body(tx: Tx) -> Occurrence:
            [outcome] = self._renew_many(tx, tx.now(), [(key, owner, token, lease)])
            if isinstance(outcome, LeaseLost):
                raise outcome
            return outcome

        return self._write(body)

    def renew_batch(self, renewals: Sequence[Renewal]) -> list[Occurrence | LeaseLost]:
        normalized = inputs.normalize_renewals(renewals)
        if not normalized:
            self._assert_open()
            return []
        return self._write(lambda tx: self._renew_many(tx, tx.now(), normalized))

    # -- settling ---------------------------------------------------------------------------

    def _settle_many(
        self, tx: Tx, now: int, requests: Sequence[inputs.SettleRequest]
    ) -> list[Occurrence | LeaseLost]:
        updated = tx.rows_many(
            "settle_occurrence",
            [
                {
                    "occurrence_id": request.occurrence_id,
                    "owner_id": request.owner_id,
                    "fence": request.fence,
                    "succeeded": 1 if request.outcome == "succeeded" else 0,
                    "retryable": 1 if request.retryable else 0,
                    "retry_available_at": (
                        now
                        if request.retry_at is None or request.retry_at < now
                        else request.retry_at
                    ),
                    "error_json": request.error_json,
                    "result_json": request.result_json,
                    "now": now,
                }
                for request in requests
            ],
        )
        results: list[Occurrence | LeaseLost] = []
        events: list[dict[str, Any]] = []
        tally: Counter[tuple[int, str, str, str]] = Counter()
        for request, row in zip(requests, updated, strict=True):
            if row is None:
                # Fenced out: this one changed nothing, and must not undo the others.
                results.append(common.lease_lost(request.occurrence_id))
                continue
            event_type, data_json = common.settle_event(row)
            events.append(
                common.event_params(
                    job_id=row["job_id"],
                    occurrence_id=request.occurrence_id,
                    event_type=event_type,
                    occurred_at=now,
                    owner_id=request.owner_id,
                    fence=request.fence,
                    data_json=data_json,
                )
            )
            _count_settlement(tally, now, row, request.owner_id)
            results.append(rows.occurrence_from_row(row))
        if events:
            tx.run("insert_events", tx.table(events))
            tx.many("add_throughput", _throughput_params(tally))
        return results

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
        request = inputs.normalize_settle_request(
            occurrence_id=occurrence_id,
            owner_id=owner_id,
            fence=fence,
            outcome=outcome,
            result=result,
            error=error,
            retryable=retryable,
            retry_at=retry_at,
        )

        def body(tx: Tx) -> Occurrence:
            [settled] = self._settle_many(tx, tx.now(), [request])
            if isinstance(settled, LeaseLost):
                raise settled
            return settled

        return self._write(body)

    def settle_batch(self, settlements: Sequence[Settlement]) -> list[Occurrence | LeaseLost]:
        requests = inputs.normalize_settlements(settlements)
        if not requests:
            self._assert_open()
            return []
        return self._write(lambda tx: self._settle_many(tx, tx.now(), requests))

    # -- giving leases up -------------------------------------------------------------------

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        key, owner, token = inputs.normalize_lease_holder(occurrence_id, owner_id, fence)
        why = contract.normalize_identifier(reason, "reason", max_length=128)

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            row = tx.one(
                "release_lease",
                {"occurrence_id": key, "owner_id": owner, "fence": token, "now": now},
            )
            if row is None:
                raise common.lease_lost(key)
            released = rows.occurrence_from_row(row)
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

    def expire_leases_of(self, owner_id: str, *, reason: str) -> list[Occurrence]:
        """End every live lease of ``owner_id`` now, because that owner is known to be gone.

        For a worker whose death is certain (its lock could be taken: the process or database
        session that held it is gone). The next claim takes each occurrence over — or
        dead-letters it, if that was its final attempt — exactly as after a natural expiry;
        fences keep this safe even if the owner were still alive. Appends
        ``occurrence_lease_expired`` with ``{reason}`` per lease.
        """
        owner = contract.normalize_identifier(owner_id, "ownerId")
        why = contract.normalize_identifier(reason, "reason", max_length=128)

        def body(tx: Tx) -> list[Occurrence]:
            now = tx.now()
            held = tx.all("running_of_owner", {"owner_id": owner})
            updated = tx.rows_many(
                "expire_lease",
                [
                    {
                        "occurrence_id": row["occurrence_id"],
                        "owner_id": owner,
                        "fence": row["fence"],
                        "now": now,
                    }
                    for row in held
                ],
            )
            expired = [rows.occurrence_from_row(row) for row in updated if row is not None]
            events = [
                common.event_params(
                    job_id=occurrence.job_id,
                    occurrence_id=occurrence.id,
                    event_type="occurrence_lease_expired",
                    occurred_at=now,
                    owner_id=owner,
                    fence=occurrence.fence,
                    data_json=contract.encode_trusted_json({"reason": why}),
                )
                for occurrence in expired
            ]
            if events:
                tx.run("insert_events", tx.table(events))
            return expired

        expired = self._write(body)
        if expired:
            self._after_enqueue()
        return expired

    # -- operator actions -------------------------------------------------------------------

    def cancel_occurrence(self, *, occurrence_id: str, actor: str, reason: str) -> Occurrence:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        who, why = inputs.normalize_actor_reason(actor, reason)
        error_json = contract.canonical_json(
            {"code": "cancelled", "message": why, "actor": who}, "error"
        )

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
            current = self._occurrence_row(tx, key)
            if current is None:
                raise NotFound(f"Scheduler occurrence does not exist: {key}")
            row = tx.one(
                "cancel_occurrence", {"occurrence_id": key, "error_json": error_json, "now": now}
            )
            if row is None:
                raise Conflict(
                    f"Occurrence {key} is {current['status']}: only queued, waiting or running "
                    "occurrences can be cancelled",
                    code="SCHEDULER_CANCEL_CONFLICT",
                    details={"status": current["status"]},
                )
            cancelled = rows.occurrence_from_row(row)
            self._append_event(
                tx,
                job_id=cancelled.job_id,
                occurrence_id=key,
                event_type="occurrence_cancelled",
                occurred_at=now,
                owner_id=current["lease_owner"],
                fence=int(current["fence"]),
                data={
                    "actor": who,
                    "reason": why,
                    "attempt": cancelled.attempt,
                    "previousStatus": current["status"],
                    "previousOwner": current["lease_owner"],
                },
            )
            return cancelled

        return self._write(body)

    def requeue_dead_letter(
        self, *, occurrence_id: str, expected_fence: int, reason: str, actor: str
    ) -> Occurrence:
        key, fence, why, who = inputs.normalize_requeue_args(
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
            requeued = rows.occurrence_from_row(row)
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
