"""The store operations, written once over a small transaction interface.

:class:`LedgerStore` implements every :class:`~jobledger.store.base.Store` operation as a
sequence of named queries run inside one transaction. The SQLite and PostgreSQL stores subclass
it and supply only what differs per engine: how a transaction is opened, which ``queries.sql``
the names resolve to, and where "now" comes from (the injected clock, or the database clock).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from .. import contract
from ..errors import (
    ClaimConflict,
    Conflict,
    DataCorrupt,
    IdempotencyPayloadMismatch,
    InvalidArgument,
    JobDisabled,
    NotFound,
    RequeueConflict,
    RevisionConflict,
)
from ..models import Event, Job, Occurrence, SchemaInfo
from . import common
from .base import UNSET, Outcome

__all__ = ["LedgerStore", "Tx", "WorkSignal"]

T = TypeVar("T")
Row = Mapping[str, Any]


class Tx(Protocol):
    """One open transaction (or read session) on a store's database."""

    def one(self, query: str, params: Mapping[str, Any] | None = None) -> Row | None:
        """Run the named query; return its first row or ``None``."""
        ...

    def all(self, query: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Run the named query; return every row."""
        ...

    def run(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run the named statement; return the number of rows it changed."""
        ...

    def now(self) -> int:
        """The current instant in epoch ms, read inside this transaction."""
        ...


class WorkSignal:
    """Wakes idle workers early when new work may be claimable: a latency hint, never a promise.

    Every enqueue or requeue through a store bumps its signal; the PostgreSQL store also bumps it
    when a ``NOTIFY`` from another process arrives. Correctness never depends on it: workers
    still poll, and leases make a missed or spurious wake-up harmless.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        with self._condition:
            return self._generation

    def notify(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()

    def wait(self, seen_generation: int, timeout_s: float) -> int:
        """Block until the generation differs from ``seen_generation`` or ``timeout_s`` passes.

        Returns the generation now current (equal to ``seen_generation`` on a timeout).
        """
        with self._condition:
            self._condition.wait_for(lambda: self._generation != seen_generation, timeout_s)
            return self._generation


class LedgerStore(ABC):
    """Shared implementation of the :class:`Store` protocol; subclasses bind an engine."""

    _target: str
    _work_signal: WorkSignal | None = None

    @property
    def work_signal(self) -> WorkSignal:
        """Bumped when work may have become claimable (see :class:`WorkSignal`)."""
        if self._work_signal is None:
            self._work_signal = WorkSignal()
        return self._work_signal

    @property
    def target(self) -> str:
        return self._target

    # -- engine hooks -----------------------------------------------------------------------

    @abstractmethod
    def _write(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` in one write transaction (commit on return, roll back on error)."""

    @abstractmethod
    def _read(self, body: Callable[[Tx], T]) -> T:
        """Run ``body`` with read access (a consistent snapshot where the engine offers one)."""

    @abstractmethod
    def _assert_open(self) -> None: ...

    @abstractmethod
    def schema_info(self) -> SchemaInfo: ...

    @abstractmethod
    def close(self) -> None: ...

    def _after_enqueue(self) -> None:
        """Called after new work commits; the PostgreSQL store also sends a NOTIFY."""
        self.work_signal.notify()

    def __enter__(self) -> LedgerStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------

    @staticmethod
    def _append_event(
        tx: Tx,
        *,
        job_id: str,
        event_type: str,
        occurred_at: int,
        data: Mapping[str, Any],
        occurrence_id: str | None = None,
        owner_id: str | None = None,
        fence: int | None = None,
    ) -> None:
        tx.run(
            "insert_event",
            {
                "job_id": job_id,
                "occurrence_id": occurrence_id,
                "event_type": event_type,
                "occurred_at": occurred_at,
                "owner_id": owner_id,
                "fence": fence,
                "data_json": common.event_json(data),
            },
        )

    @staticmethod
    def _job_row(tx: Tx, job_id: str) -> Row | None:
        return tx.one("get_job", {"job_id": job_id})

    @staticmethod
    def _occurrence_row(tx: Tx, occurrence_id: str) -> Row | None:
        return tx.one("get_occurrence", {"occurrence_id": occurrence_id})

    # -- jobs -------------------------------------------------------------------------------

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
            return common.job_from_row(_required(self._job_row(tx, job.id)))

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
            return common.job_from_row(_required(self._job_row(tx, key)))

        return self._write(body)

    # -- enqueue ----------------------------------------------------------------------------

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

    # -- claims -----------------------------------------------------------------------------

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
            self._dead_letter_expired_leases(tx, now)
            candidate = tx.one(
                "claim_next_candidate",
                {"now": now, "job_kind": kind, "workspace_id": workspace},
            )
            if candidate is None:
                return None
            return self._apply_claim(
                tx, candidate, owner=owner, lease_ms=lease, now=now, targeted=False
            )

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
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        token = contract.normalize_positive_int(fence, "fence")
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
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        token = contract.normalize_positive_int(fence, "fence")
        kind, result_json, error_json, retry, retry_time = common.normalize_settle_args(
            outcome=outcome, result=result, error=error, retryable=retryable, retry_at=retry_at
        )

        def body(tx: Tx) -> Occurrence:
            now = tx.now()
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
                outcome=kind,
                retryable=retry,
                retry_at=retry_time,
                result_json=result_json,
                error_json=error_json,
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

        return self._write(body)

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        key = contract.normalize_identifier(occurrence_id, "occurrenceId")
        owner = contract.normalize_identifier(owner_id, "ownerId")
        token = contract.normalize_positive_int(fence, "fence")
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

    # -- audit ------------------------------------------------------------------------------

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


def _required(row: Row | None) -> Row:
    if row is None:
        raise DataCorrupt("A row written in this transaction could not be read back")
    return row


def validate_clock_reading(value: object) -> int:
    """A clock must return a non-negative safe integer of epoch ms."""
    try:
        return contract.normalize_epoch_ms(value, "clock result")
    except InvalidArgument:
        raise InvalidArgument("clock result must be a non-negative safe-integer epoch ms") from None
