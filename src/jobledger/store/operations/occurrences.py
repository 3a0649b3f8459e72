"""Recording firings (idempotent enqueue) and reading occurrences and the audit log."""

from __future__ import annotations

from typing import Any

from ... import contract
from ...errors import DataCorrupt, IdempotencyPayloadMismatch, JobDisabled, NotFound
from ...models import Event, Occurrence
from .. import common
from ..base import UNSET
from ..tx import Tx
from .base import OperationsBase

__all__ = ["OccurrenceOperations"]


class OccurrenceOperations(OperationsBase):
    """Recording firings (idempotent enqueue) and reading occurrences and the audit log."""

    def enqueue_occurrence(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
    ) -> Occurrence:
        return self._enqueue(job_id, scheduled_for, trigger_key, available_at, payload, once=False)

    def enqueue_occurrence_once_per_trigger(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
    ) -> Occurrence:
        return self._enqueue(job_id, scheduled_for, trigger_key, available_at, payload, once=True)

    def _enqueue(
        self,
        job_id: object,
        scheduled_for: object,
        trigger_key: object,
        available_at: object,
        payload: object,
        *,
        once: bool,
    ) -> Occurrence:
        key = contract.normalize_identifier(job_id, "jobId")
        scheduled = contract.normalize_epoch_ms(scheduled_for, "scheduledFor")
        trigger = contract.normalize_identifier(trigger_key, "triggerKey")
        available = contract.normalize_epoch_ms(
            scheduled if available_at is None else available_at, "availableAt"
        )
        override_json = common.normalize_payload_override(payload)
        inserted = False

        def body(tx: Tx) -> Occurrence:
            nonlocal inserted
            now = tx.now()
            if once:
                existing = tx.all(
                    "list_occurrences_by_trigger",
                    {"job_id": key, "trigger_key": trigger, "limit": 2},
                )
                if len(existing) > 1:
                    raise DataCorrupt(
                        "More than one occurrence exists for a once-per-trigger key",
                        details={"jobId": key, "triggerKey": trigger},
                    )
                if existing:
                    return common.occurrence_from_row(existing[0], deduplicated=True)
            row = self._job_row(tx, key)
            if row is None:
                raise NotFound(f"Scheduler job does not exist: {key}")
            job = common.job_from_row(row)
            if not job.enabled:
                raise JobDisabled(f"Scheduler job is disabled: {key}")
            occurrence_id, idempotency_key = contract.derive_occurrence_identity(
                job_id=key, job_revision=job.revision, scheduled_for=scheduled, trigger_key=trigger
            )
            payload_json = (
                contract.canonical_json(job.payload, "occurrence.payload")
                if override_json is None
                else override_json
            )
            changed = tx.run(
                "insert_occurrence",
                {
                    "occurrence_id": occurrence_id,
                    "job_id": key,
                    "job_revision": job.revision,
                    "idempotency_key": idempotency_key,
                    "trigger_key": trigger,
                    "scheduled_for": scheduled,
                    "available_at": available,
                    "max_attempts": job.max_attempts,
                    "authority_json": contract.canonical_json(
                        job.authority, "occurrence.authority"
                    ),
                    "payload_json": payload_json,
                    "now": now,
                },
            )
            stored = tx.one("get_occurrence_by_key", {"idempotency_key": idempotency_key})
            if stored is None or stored["occurrence_id"] != occurrence_id:
                raise DataCorrupt("Occurrence idempotency identity does not match stored data")
            if stored["payload_json"] != payload_json:
                raise IdempotencyPayloadMismatch(
                    "Occurrence idempotency identity was reused with a different payload",
                    details={"jobId": key, "triggerKey": trigger},
                )
            if changed == 1:
                inserted = True
                self._append_event(
                    tx,
                    job_id=key,
                    occurrence_id=occurrence_id,
                    event_type="occurrence_enqueued",
                    occurred_at=now,
                    data={
                        "jobRevision": job.revision,
                        "scheduledFor": scheduled,
                        "triggerKey": trigger,
                    },
                )
            return common.occurrence_from_row(stored, deduplicated=changed == 0)

        occurrence = self._write(body)
        if inserted:
            self._after_enqueue()
        return occurrence

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        self._assert_open()
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        row = self._read(lambda tx: self._occurrence_row(tx, key))
        return None if row is None else common.occurrence_from_row(row)

    def list_occurrences_by_trigger(
        self, *, job_id: str, trigger_key: str, limit: int = 2
    ) -> list[Occurrence]:
        self._assert_open()
        params = {
            "job_id": contract.normalize_identifier(job_id, "jobId"),
            "trigger_key": contract.normalize_identifier(trigger_key, "triggerKey"),
            "limit": common.normalize_limit(limit),
        }
        rows = self._read(lambda tx: tx.all("list_occurrences_by_trigger", params))
        return [common.occurrence_from_row(row) for row in rows]

    def history(
        self,
        *,
        occurrence_id: str | None = None,
        job_id: str | None = None,
        limit: int = contract.DEFAULT_HISTORY_LIMIT,
    ) -> list[Event]:
        self._assert_open()
        bounded = contract.normalize_history_limit(limit)
        occurrence = common.normalize_optional_identifier(occurrence_id, "occurrenceId")
        job = common.normalize_optional_identifier(job_id, "jobId")
        params: dict[str, Any] = {"limit": bounded, "occurrence_id": occurrence, "job_id": job}
        if occurrence is not None and job is not None:
            query = "history_by_occurrence_and_job"
        elif occurrence is not None:
            query = "history_by_occurrence"
        elif job is not None:
            query = "history_by_job"
        else:
            query = "history_all"
        rows = self._read(lambda tx: tx.all(query, params))
        return [common.event_from_row(row) for row in rows]

    def list_dead_letters(
        self, *, job_id: str | None = None, limit: int = contract.DEFAULT_HISTORY_LIMIT
    ) -> list[Occurrence]:
        self._assert_open()
        bounded = contract.normalize_history_limit(limit)
        job = common.normalize_optional_identifier(job_id, "jobId")
        if job is None:
            rows = self._read(lambda tx: tx.all("list_dead_letters", {"limit": bounded}))
        else:
            rows = self._read(
                lambda tx: tx.all("list_dead_letters_by_job", {"limit": bounded, "job_id": job})
            )
        return [common.occurrence_from_row(row) for row in rows]
