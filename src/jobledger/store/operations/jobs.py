"""Job definitions: create, read, compare-and-swap update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import contract
from ...errors import Conflict, NotFound, RevisionConflict
from ...models import Job
from .. import common
from ..tx import Tx
from .base import OperationsBase, required

__all__ = ["JobOperations"]


class JobOperations(OperationsBase):
    """Job definitions: create, read, compare-and-swap update."""

    def create_job(
        self,
        *,
        id: str,
        kind: str,
        authority: Mapping[str, Any],
        trigger: Any = None,
        payload: Any = None,
        enabled: bool = True,
        max_attempts: int = contract.DEFAULT_MAX_ATTEMPTS,
    ) -> Job:
        job = common.normalize_job_input(
            id=id,
            kind=kind,
            authority=authority,
            trigger=trigger,
            payload=payload,
            enabled=enabled,
            max_attempts=max_attempts,
        )
        params = {
            "job_id": job.id,
            "kind": job.kind,
            "trigger_json": job.trigger_json(),
            "payload_json": job.payload_json(),
            "authority_json": job.authority_json(),
            "enabled": 1 if job.enabled else 0,
            "max_attempts": job.max_attempts,
        }

        def body(tx: Tx) -> Job:
            now = tx.now()
            if self._job_row(tx, job.id) is not None:
                raise Conflict(f"Scheduler job already exists: {job.id}")
            tx.run("insert_job", {**params, "now": now})
            self._append_event(
                tx, job_id=job.id, event_type="job_created", occurred_at=now, data={"revision": 1}
            )
            return common.job_from_row(required(self._job_row(tx, job.id)))

        return self._write(body)

    def get_job(self, job_id: str) -> Job | None:
        self._assert_open()
        key = contract.normalize_identifier(job_id, "jobId")
        row = self._read(lambda tx: self._job_row(tx, key))
        return None if row is None else common.job_from_row(row)

    def update_job(self, job_id: str, *, expected_revision: int, patch: Mapping[str, Any]) -> Job:
        key = contract.normalize_identifier(job_id, "jobId")
        revision = contract.normalize_positive_int(expected_revision, "expectedRevision")
        normalized, changed_fields = common.normalize_job_patch(patch)

        def body(tx: Tx) -> Job:
            now = tx.now()
            row = self._job_row(tx, key)
            if row is None:
                raise NotFound(f"Scheduler job does not exist: {key}")
            current = common.job_from_row(row)
            if current.revision != revision:
                raise RevisionConflict(
                    f"Scheduler job revision changed: {key}",
                    details={"expectedRevision": revision, "actualRevision": current.revision},
                )
            merged = {
                "kind": current.kind,
                "trigger": current.trigger,
                "payload": current.payload,
                "authority": current.authority,
                "enabled": current.enabled,
                "max_attempts": current.max_attempts,
                **normalized,
            }
            changed = tx.run(
                "update_job",
                {
                    "job_id": key,
                    "kind": merged["kind"],
                    "trigger_json": contract.canonical_json(merged["trigger"], "job.trigger"),
                    "payload_json": contract.canonical_json(merged["payload"], "job.payload"),
                    "authority_json": contract.canonical_json(merged["authority"], "job.authority"),
                    "enabled": 1 if merged["enabled"] else 0,
                    "next_revision": revision + 1,
                    "max_attempts": merged["max_attempts"],
                    "now": now,
                    "expected_revision": revision,
                },
            )
            if changed != 1:
                raise RevisionConflict(f"Scheduler job revision changed during update: {key}")
            self._append_event(
                tx,
                job_id=key,
                event_type="job_updated",
                occurred_at=now,
                data={
                    "fromRevision": revision,
                    "toRevision": revision + 1,
                    "changedFields": changed_fields,
                },
            )
            return common.job_from_row(required(self._job_row(tx, key)))

        return self._write(body)
