"""Job definitions: create, read, list, compare-and-swap update, remove."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ... import contract
from ...errors import Conflict, InvalidArgument, NotFound, RevisionConflict
from ...models import Job
from .. import inputs, rows
from ..tx import Tx
from .base import OperationsBase, required

__all__ = ["JobOperations"]


def _is_schedule(trigger: Any) -> bool:
    """A jobledger schedule (already validated): the planner gives it meaning."""
    return isinstance(trigger, dict) and trigger.get("jobledger") == "schedule"


def _declared_json(declared: object) -> str | None:
    """A declaration to record (SPEC §14): a mapping of job fields, as canonical JSON."""
    if declared is None:
        return None
    if not isinstance(declared, Mapping):
        raise InvalidArgument("declared must be a mapping", details={"field": "declared"})
    return contract.canonical_json(dict(declared), "declared")


def _workspace(authority: Mapping[str, Any]) -> str | None:
    workspace = authority.get("workspaceId")
    return workspace if isinstance(workspace, str) else None


class JobOperations(OperationsBase):
    """Job definitions: create, read, list, compare-and-swap update, remove."""

    @staticmethod
    def _authority_id(tx: Tx, authority_json: str) -> int:
        """The id of this (canonical) authority envelope, stored once."""
        found = required(tx.one("upsert_authority", {"authority_json": authority_json}))
        return int(found["authority_id"])

    @staticmethod
    def _write_schedule_state(
        tx: Tx, *, job_id: str, revision: int, trigger: Any, enabled: bool, now: int
    ) -> None:
        """Keep the planner's row in step with the revision just written.

        A schedule is planned from the instant its revision was written (the planner looks at
        it at once: ``next_due_at = now``); a disabled job is not looked at; a job whose trigger
        is not a jobledger schedule has no row.
        """
        if not _is_schedule(trigger):
            tx.run("delete_schedule", {"job_id": job_id})
            return
        tx.run(
            "upsert_schedule",
            {
                "job_id": job_id,
                "job_revision": revision,
                "planned_through": now,
                "next_due_at": now if enabled else None,
                "now": now,
            },
        )

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
        actor: str | None = None,
        queue: str = contract.DEFAULT_QUEUE,
        priority: int = 0,
        on_lost_lease: str = "retry",
        declared: Mapping[str, Any] | None = None,
    ) -> Job:
        job = inputs.normalize_job_input(
            id=id,
            kind=kind,
            authority=authority,
            trigger=trigger,
            payload=payload,
            enabled=enabled,
            max_attempts=max_attempts,
            queue=queue,
            priority=priority,
            on_lost_lease=on_lost_lease,
        )
        who = inputs.normalize_optional_identifier(actor, "actor")
        params: dict[str, Any] = {
            "job_id": job.id,
            "kind": job.kind,
            "trigger_json": contract.encode_trusted_json(job.trigger),
            "payload_json": contract.encode_trusted_json(job.payload),
            "authority_json": contract.encode_trusted_json(job.authority),
            "enabled": 1 if job.enabled else 0,
            "max_attempts": job.max_attempts,
            "queue": job.queue,
            "priority": job.priority,
            "on_lost_lease": job.on_lost_lease,
            "declared_json": _declared_json(declared),
        }
        data: dict[str, Any] = {"revision": 1}
        if who is not None:
            data["actor"] = who

        def body(tx: Tx) -> Job:
            now = tx.now()
            if self._job_row(tx, job.id) is not None:
                raise Conflict(f"Scheduler job already exists: {job.id}")
            authority_id = self._authority_id(tx, params["authority_json"])
            tx.run("insert_job", {**params, "authority_id": authority_id, "now": now})
            self._append_event(
                tx, job_id=job.id, event_type="job_created", occurred_at=now, data=data
            )
            if _is_schedule(job.trigger):  # a new job has no planner row to remove otherwise
                self._write_schedule_state(
                    tx, job_id=job.id, revision=1, trigger=job.trigger, enabled=job.enabled, now=now
                )
            return rows.job_from_row(required(self._job_row(tx, job.id)))

        created = self._write(body)
        self._forget_job(created.id)
        return created

    def record_job_declaration(
        self, job_id: str, *, expected_revision: int, declared: Mapping[str, Any]
    ) -> Job:
        """Record ``declared`` as the declaration last applied to the job from code, changing
        nothing else (no new revision, no event): ``ensure_job`` when the code declares what
        the job already is (SPEC §14). ``SCHEDULER_NOT_FOUND``, ``SCHEDULER_REVISION_CONFLICT``
        as :meth:`update_job`."""
        key = contract.normalize_identifier(job_id, "jobId")
        revision = contract.normalize_positive_int(expected_revision, "expectedRevision")
        encoded = _declared_json(declared)
        if encoded is None:
            raise InvalidArgument("declared must be a mapping", details={"field": "declared"})

        def body(tx: Tx) -> Job:
            row = tx.one(
                "record_job_declaration",
                {"job_id": key, "expected_revision": revision, "declared_json": encoded},
            )
            if row is None:
                if self._job_row(tx, key) is None:
                    raise NotFound(f"Scheduler job does not exist: {key}")
                raise RevisionConflict(f"Scheduler job revision changed: {key}")
            return rows.job_from_row(row)

        recorded = self._write(body)
        self._forget_job(key)
        return recorded

    def get_job(self, job_id: str) -> Job | None:
        self._assert_open()
        key = contract.normalize_identifier(job_id, "jobId")
        row = self._read(lambda tx: self._job_row(tx, key))
        return None if row is None else rows.job_from_row(row)

    def list_jobs(self, *, after: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs ordered by id, ``limit`` (≤1000) at a time after the id ``after``."""
        self._assert_open()
        start = inputs.normalize_optional_identifier(after, "after")
        bounded = inputs.normalize_page_limit(limit)
        found = self._read(lambda tx: tx.all("list_jobs", {"after_id": start, "limit": bounded}))
        return [rows.job_from_row(row) for row in found]

    def update_job(
        self,
        job_id: str,
        *,
        expected_revision: int,
        patch: Mapping[str, Any],
        actor: str | None = None,
        source: str = "operator",
        declared: Mapping[str, Any] | None = None,
    ) -> Job:
        key = contract.normalize_identifier(job_id, "jobId")
        source = inputs.normalize_source(source)
        declared_json = _declared_json(declared)
        revision = contract.normalize_positive_int(expected_revision, "expectedRevision")
        normalized, changed_fields = inputs.normalize_job_patch(patch)
        who = inputs.normalize_optional_identifier(actor, "actor")

        def body(tx: Tx) -> Job:
            now = tx.now()
            row = self._job_row(tx, key)
            if row is None:
                raise NotFound(f"Scheduler job does not exist: {key}")
            current = rows.job_from_row(row)
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
                "queue": current.queue,
                "priority": current.priority,
                "on_lost_lease": current.on_lost_lease,
                **normalized,
            }
            authority_json = contract.canonical_json(merged["authority"], "job.authority")
            # Only kind and authority bind an occurrence: any other change leaves its live
            # occurrences runnable (SPEC §14).
            run_revision = (
                current.run_revision
                if set(normalized) <= inputs.RUN_NEUTRAL_FIELDS
                else revision + 1
            )
            # SPEC §14: an operator's fields stand against an unchanged declaration; a declaration
            # that changes a field takes it back.
            operator = set(current.operator_fields)
            if source == "operator":
                operator |= set(normalized)
                recorded = row["declared_json"]
            else:
                operator -= set(normalized)
                recorded = declared_json if declared_json is not None else row["declared_json"]
            changed = tx.run(
                "update_job",
                {
                    "declared_json": recorded,
                    "operator_set_json": contract.canonical_json(sorted(operator)),
                    "job_id": key,
                    "kind": merged["kind"],
                    "trigger_json": contract.canonical_json(merged["trigger"], "job.trigger"),
                    "payload_json": contract.canonical_json(merged["payload"], "job.payload"),
                    "authority_json": authority_json,
                    "enabled": 1 if merged["enabled"] else 0,
                    "next_revision": revision + 1,
                    "max_attempts": merged["max_attempts"],
                    "now": now,
                    "expected_revision": revision,
                    "queue": merged["queue"],
                    "priority": merged["priority"],
                    "on_lost_lease": merged["on_lost_lease"],
                    "run_revision": run_revision,
                    "authority_id": self._authority_id(tx, authority_json),
                },
            )
            if changed != 1:
                raise RevisionConflict(f"Scheduler job revision changed during update: {key}")
            # Live occurrences follow the job's kind, workspace and enabled flag, which is what
            # keeps claims on their index (and a disabled job's backlog out of it).
            tx.run(
                "sync_live_occurrences",
                {
                    "job_id": key,
                    "kind": merged["kind"],
                    "workspace_id": _workspace(merged["authority"]),
                    "runnable": 1 if merged["enabled"] else 0,
                },
            )
            if merged["max_attempts"] != current.max_attempts:
                tx.run(
                    "follow_max_attempts",
                    {
                        "job_id": key,
                        "max_attempts": merged["max_attempts"],
                        "previous_max_attempts": current.max_attempts,
                    },
                )
            if merged["enabled"] and not current.enabled:
                tx.run("regate_held_of_job", {"job_id": key})
            data: dict[str, Any] = {
                "fromRevision": revision,
                "toRevision": revision + 1,
                "changedFields": changed_fields,
            }
            if who is not None:
                data["actor"] = who
            if source == "declaration":  # an operator's update keeps the reference's shape
                data["source"] = source
            self._append_event(tx, job_id=key, event_type="job_updated", occurred_at=now, data=data)
            self._write_schedule_state(
                tx,
                job_id=key,
                revision=revision + 1,
                trigger=merged["trigger"],
                enabled=bool(merged["enabled"]),
                now=now,
            )
            return rows.job_from_row(required(self._job_row(tx, key)))

        self._forget_job(key)
        updated = self._write(body)
        self._forget_job(key)
        return updated

    def remove_job(
        self, job_id: str, *, expected_revision: int, actor: str, reason: str
    ) -> dict[str, Any]:
        """Delete a job with no live occurrences, its settled history and its events.

        Refused with ``SCHEDULER_JOB_HAS_LIVE_OCCURRENCES`` while any occurrence is queued,
        running or waiting to retry (cancel or finish them first). What was removed — the job's
        last definition and the counts — is recorded in the audit log with ``actor`` and
        ``reason`` (``action="job_removed"``), since the job's own events go with it.
        """
        key = contract.normalize_identifier(job_id, "jobId")
        revision = contract.normalize_positive_int(expected_revision, "expectedRevision")
        who, why = inputs.normalize_actor_reason(actor, reason)

        def body(tx: Tx) -> dict[str, Any]:
            now = tx.now()
            row = self._job_row(tx, key)
            if row is None:
                raise NotFound(f"Scheduler job does not exist: {key}")
            job = rows.job_from_row(row)
            if job.revision != revision:
                raise RevisionConflict(
                    f"Scheduler job revision changed: {key}",
                    details={"expectedRevision": revision, "actualRevision": job.revision},
                )
            live = int(required(tx.one("count_live_occurrences_of_job", {"job_id": key}))["live"])
            if live:
                raise Conflict(
                    f"Job {key} still has {live} live occurrence(s); cancel them or let them "
                    "finish before removing the job",
                    code="SCHEDULER_JOB_HAS_LIVE_OCCURRENCES",
                    details={"jobId": key, "live": live},
                )
            requeues = tx.run("delete_requeues_of_job", {"job_id": key})
            tx.run("delete_keys_of_job", {"job_id": key})
            tx.run("delete_tags_of_job", {"job_id": key})
            tx.run("delete_adjudications_of_job", {"job_id": key})
            tx.run("delete_dependencies_of_job", {"job_id": key})
            events = tx.run("delete_events_of_job", {"job_id": key})
            occurrences = tx.run("delete_occurrences_of_job", {"job_id": key})
            tx.run("delete_schedule", {"job_id": key})
            tx.run("delete_job", {"job_id": key, "expected_revision": revision})
            summary = {
                "jobId": key,
                "reason": why,
                "revision": job.revision,
                "kind": job.kind,
                "trigger": job.trigger,
                "payload": job.payload,
                "authority": job.authority,
                "occurrences": occurrences,
                "events": events,
                "requeues": requeues,
            }
            self._audit(tx, now=now, action="job_removed", actor=who, subject=key, data=summary)
            return summary

        removed = self._write(body)
        self._forget_job(key)
        return removed
