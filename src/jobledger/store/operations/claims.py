"""Claims: the most overdue claimable work, leased in one transaction.

A claim batch is a handful of statements whatever its size: the expired-final-lease sweep once,
one candidate probe per kind (the claim index holds only claimable rows of enabled jobs, so a
probe stops after the rows it takes), one guarded ``UPDATE … RETURNING`` for the picked rows and
one multi-row event insert (pipelined on PostgreSQL).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from ... import contract
from ...errors import ClaimConflict, NotFound
from ...models import Job, Occurrence
from .. import common, inputs, rows
from ..tx import Tx
from .base import OperationsBase

__all__ = ["ClaimOperations"]


class ClaimOperations(OperationsBase):
    """Claims: the lazy final-lease sweep, batched claims and targeted claims."""

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
            tx.many("add_throughput", common.throughput_params(tally))

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
