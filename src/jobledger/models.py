"""Frozen value objects returned by every store: jobs, occurrences, events, schema info.

Attribute names are snake_case; the JSON values they hold (payload, authority, trigger, errors,
results, event data) keep the reference's camelCase field names so databases stay compatible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Event",
    "Job",
    "MigrationRecord",
    "Occurrence",
    "OccurrenceStatus",
    "SchemaInfo",
    "Settlement",
]

OccurrenceStatus = Literal["queued", "running", "retry_wait", "succeeded", "dead_letter"]


@dataclass(frozen=True, slots=True)
class Job:
    """A job definition. ``revision`` starts at 1 and grows by one on every update."""

    id: str
    kind: str
    trigger: Any
    payload: Any
    authority: dict[str, Any]
    enabled: bool
    revision: int
    max_attempts: int
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One logical firing of a job, with its lease (``lease_owner``, ``fence``) and outcome.

    ``deduplicated`` is only meaningful on the value returned by an enqueue: ``True`` when the
    firing already existed and nothing was written.
    """

    id: str
    job_id: str
    job_revision: int
    idempotency_key: str
    trigger_key: str
    scheduled_for: int
    available_at: int
    status: OccurrenceStatus
    attempt: int
    max_attempts: int
    fence: int
    lease_owner: str | None
    lease_expires_at: int | None
    authority: dict[str, Any]
    payload: Any
    last_error: Any
    result: Any
    created_at: int
    updated_at: int
    settled_at: int | None
    deduplicated: bool = False

    @property
    def is_terminal(self) -> bool:
        return self.status in ("succeeded", "dead_letter")


@dataclass(frozen=True, slots=True)
class Settlement:
    """One settle in a :meth:`~jobledger.Store.settle_batch`: the same fields as ``settle``.

    ``outcome`` is ``"succeeded"`` (stores ``result``) or ``"failed"`` (stores ``error``; see
    ``retryable`` and ``retry_at``). The store validates every field, as ``settle`` does.
    """

    occurrence_id: str
    owner_id: str
    fence: int
    outcome: Literal["succeeded", "failed"]
    result: Any = None
    error: Any = None
    retryable: bool = True
    retry_at: int | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One audit record, written in the same transaction as the change it records."""

    event_id: int
    job_id: str
    occurrence_id: str | None
    type: str
    occurred_at: int
    owner_id: str | None
    fence: int | None
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MigrationRecord:
    version: int
    name: str
    checksum: str
    applied_at: int


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """What :meth:`Store.schema_info` reports: identity, version and the newest migration."""

    application_id: int
    schema_version: int
    migration: MigrationRecord
    migrations: tuple[MigrationRecord, ...] = field(default=())
