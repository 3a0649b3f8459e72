"""Frozen value objects returned by every store: jobs, occurrences, events, schema info.

Attribute names are snake_case; the JSON values they hold (payload, authority, trigger, errors,
results, event data) keep the reference's camelCase field names so databases stay compatible.
Instants are epoch milliseconds; each has a datetime twin (``scheduled_for`` →
``scheduled_time``: see :mod:`~jobledger.models.times`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..authority import normalize_authority
from ..contract import (
    DEFAULT_EXECUTION_ERROR,
    DEFAULT_QUEUE,
    TERMINAL_STATUSES,
    canonical_json,
    normalize_epoch_ms,
    normalize_identifier,
    normalize_max_attempts,
    normalize_positive_int,
    normalize_priority,
    normalize_queue_name,
)
from ..errors import InvalidArgument
from .progress import Progress
from .times import UtcTime, UtcTimeOrNone

__all__ = [
    "COUNT_CAP",
    "UNSET",
    "WORKER_STALE_AFTER",
    "AuditRecord",
    "DueItem",
    "EnqueueRequest",
    "Event",
    "Job",
    "LeaseHolder",
    "MigrationRecord",
    "Occurrence",
    "OccurrenceCount",
    "OccurrencePage",
    "OccurrenceStatus",
    "Progress",
    "PruneReport",
    "Renewal",
    "SchemaInfo",
    "Settlement",
    "ThroughputBucket",
    "Unset",
    "VerifyCheck",
    "VerifyReport",
    "WorkerRecord",
]


class Unset:
    """Marker for "argument not given" where ``None`` is a meaningful JSON value."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()

OccurrenceStatus = Literal[
    "blocked", "queued", "running", "retry_wait", "succeeded", "dead_letter", "cancelled"
]
LostLeasePolicy = Literal["retry", "adjudicate"]
ParentFailurePolicy = Literal["cancel", "run"]


_MISSING: Any = object()
# How a job's fields compare (JSON canonically), for changes_to and declaration_changes.
_JOB_FIELD_FORMS: dict[str, Callable[[Any], Any]] = {
    "kind": lambda value: normalize_identifier(value, "kind", max_length=128),
    "trigger": lambda value: canonical_json(value, "trigger"),
    "payload": lambda value: canonical_json(value, "payload"),
    "authority": lambda value: canonical_json(normalize_authority(value)),
    "enabled": lambda value: value,
    "max_attempts": normalize_max_attempts,
    "queue": normalize_queue_name,
    "priority": normalize_priority,
    "on_lost_lease": lambda value: value,
}


@dataclass(frozen=True, slots=True)
class Job:
    """A job definition. ``revision`` starts at 1 and grows by one on every update.

    ``queue`` and ``priority`` (SPEC §7) are what its occurrences snapshot at enqueue, unless
    an enqueue names its own; ``on_lost_lease`` what becomes of an occurrence whose worker is
    gone (SPEC §9). ``run_revision`` is the newest revision that changed what runs or on whose
    behalf — its ``kind`` or ``authority`` (SPEC §14): any other update makes a new revision but
    leaves it, so occurrences enqueued before it are not stale.
    """

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
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    on_lost_lease: LostLeasePolicy = "retry"
    run_revision: int = 1
    # SPEC §14: the declaration last applied from code (``ensure_job``; ``None``: none recorded)
    # and the fields an operator set since (their values stand against an unchanged one).
    declared: dict[str, Any] | None = field(default=None, compare=False)
    operator_fields: tuple[str, ...] = field(default=(), compare=False)

    def binds(self, job_revision: int) -> bool:
        """Whether an occurrence bound to ``job_revision`` still runs as this job: it is stale
        once the job's kind or authority changed after it (``run_revision``), or when it names
        a revision the job never reached (SPEC §14)."""
        return self.run_revision <= job_revision <= self.revision

    def changes_to(self, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``wanted`` (any of ``kind``, ``trigger``, ``payload``, ``authority``,
        ``enabled``, ``max_attempts``) that differ from this job once normalized — JSON compared
        canonically — as a patch for ``update_job`` (empty: nothing to change). A value that is
        not valid raises ``SCHEDULER_INVALID_ARGUMENT``."""
        normalized = _JOB_FIELD_FORMS
        stored = {
            "kind": self.kind,
            "trigger": canonical_json(self.trigger),
            "payload": canonical_json(self.payload),
            "authority": canonical_json(self.authority),
            "enabled": self.enabled,
            "max_attempts": self.max_attempts,
            "queue": self.queue,
            "priority": self.priority,
            "on_lost_lease": self.on_lost_lease,
        }
        return {
            name: value for name, value in wanted.items() if normalized[name](value) != stored[name]
        }

    def changes_from_declared(self, wanted: Mapping[str, Any]) -> list[str]:
        """The fields of ``wanted`` whose value differs from :attr:`declared` (all of them when
        no declaration is recorded)."""
        if self.declared is None:
            return sorted(wanted)
        return sorted(
            name
            for name, value in wanted.items()
            if name not in self.declared
            or _JOB_FIELD_FORMS[name](self.declared[name]) != _JOB_FIELD_FORMS[name](value)
        )

    def declaration_changes(self, wanted: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`changes_to`, less what an operator set and the code did not change since
        (SPEC §14): a field in :attr:`operator_fields` stays as the operator left it unless its
        declared value differs from the declaration last applied (:attr:`declared`)."""
        patch = self.changes_to(wanted)
        for name in list(patch):
            if name not in self.operator_fields:
                continue
            if self.declared is None:
                del patch[name]  # no declaration recorded to compare with: the operator's stands
                continue
            last = self.declared.get(name, _MISSING)
            if last is not _MISSING and (
                _JOB_FIELD_FORMS[name](last) == _JOB_FIELD_FORMS[name](wanted[name])
            ):
                del patch[name]  # the code did not change it: the operator's value stands
        return patch

    created_time = UtcTime("created_at")
    updated_time = UtcTime("updated_at")


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One logical firing of a job, with its lease (``lease_owner``, ``fence``) and outcome.

    ``deduplicated`` is only meaningful on the value returned by an enqueue: ``True`` when the
    firing already existed and nothing was written. ``kind`` is the job's kind (kept current
    while the occurrence is live). ``queue``, ``priority`` and ``partition`` are SPEC §7's
    (snapshotted at enqueue); ``on_lost_lease`` the job's policy when it was enqueued;
    ``snoozes`` how often its handler snoozed it; ``parents`` the occurrences it runs after
    (SPEC §10; status ``blocked`` until they are terminal) and ``on_parent_failure`` what a
    failed parent does to it. ``trace_context`` is the W3C trace context (``traceparent``,
    ``tracestate``) of the enqueue that made it, when that enqueue was traced
    (``docs/observability.md``). ``job`` is set only on occurrences returned by a claim: the
    job as it was inside the claiming transaction, so a runtime needs no second read; and on those
    ``reclaimed`` says the claim took over an expired lease. ``started_at``: when the handler
    of the current (or last) attempt began — ``None`` while the attempt is only claimed (say,
    buffered ahead of a free slot): a crash gives such an attempt back instead of spending it.
    ``tags`` and ``meta`` are what its enqueue gave (``tags=``, ``meta=``; filter with
    ``list_occurrences(tag=…)``); ``progress`` the last one its handler reported
    (``ctx.progress``), or ``None``.
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
    kind: str = ""
    job: Job | None = field(default=None, compare=False, repr=False)
    reclaimed: bool = field(default=False, compare=False, repr=False)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    partition: str | None = None
    on_lost_lease: LostLeasePolicy = "retry"
    snoozes: int = 0
    parents: tuple[str, ...] = ()
    on_parent_failure: ParentFailurePolicy | None = None
    trace_context: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    started_at: int | None = None
    tags: tuple[str, ...] = ()
    meta: Mapping[str, Any] | None = None
    progress: Progress | None = None

    @property
    def is_terminal(self) -> bool:
        """Settled for good: succeeded, dead-lettered (until an operator requeues it) or
        cancelled."""
        return self.status in TERMINAL_STATUSES

    scheduled_time = UtcTime("scheduled_for")
    available_time = UtcTime("available_at")
    lease_expires_time = UtcTimeOrNone("lease_expires_at")
    created_time = UtcTime("created_at")
    updated_time = UtcTime("updated_at")
    settled_time = UtcTimeOrNone("settled_at")
    started_time = UtcTimeOrNone("started_at")


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One firing in a :meth:`~jobledger.Store.enqueue_batch`: the same fields as
    ``enqueue_occurrence`` (``once_per_trigger`` selects ``enqueue_occurrence_once_per_trigger``'s
    rule). ``payload`` left as ``UNSET`` snapshots the job's payload. ``match_payload`` (with
    ``once_per_trigger`` and a payload): an existing occurrence whose payload differs raises
    ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH`` (and the batch writes nothing) instead of being
    returned as it is — an idempotency key reused for different work is a mistake.
    ``queue``/``priority`` ``None`` take the job's; ``partition`` ``None`` is none (SPEC §7);
    a reused key with another queue, priority or partition returns the first occurrence
    unchanged. ``trace_context`` (``{"traceparent": …, "tracestate": …}``, W3C Trace Context)
    is stored with a new occurrence so its attempts continue the enqueuer's trace. ``after``
    names the parent occurrences (ids) it runs after and ``on_parent_failure`` what a failed
    parent does to it (SPEC §10; ``None`` is ``"cancel"`` when it has parents); a reused key
    keeps the first enqueue's parents. ``tags`` (at most 16 distinct strings of 1..64 letters,
    digits and ``_ - . : / = @ +``) and ``meta`` (a JSON object, at most 4,096 bytes encoded)
    are stored with a new occurrence; a reused key keeps the first enqueue's."""

    job_id: str
    scheduled_for: int
    trigger_key: str
    available_at: int | None = None
    payload: Any = UNSET
    once_per_trigger: bool = False
    match_payload: bool = False
    queue: str | None = None
    priority: int | None = None
    partition: str | None = None
    trace_context: Mapping[str, str] | None = None
    after: tuple[str, ...] = ()
    on_parent_failure: ParentFailurePolicy | None = None
    tags: Sequence[str] = ()
    meta: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Renewal:
    """One lease extension in a :meth:`~jobledger.Store.renew_batch`: the same fields as
    ``renew``."""

    occurrence_id: str
    owner_id: str
    fence: int
    lease_ms: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """One settle in a :meth:`~jobledger.Store.settle_batch`: the same fields as ``settle``.

    ``outcome`` is ``"succeeded"`` (stores ``result``) or ``"failed"`` (stores ``error``; see
    ``retryable`` and ``retry_at``) — or ``"snoozed"`` (a runtime's, SPEC §9): the attempt is
    given back and the occurrence waits until ``retry_at``; past the snooze cap it becomes a
    dead letter with ``error``. A settlement made with :meth:`checked` was validated, and
    its result or error encoded as JSON, when it was made; a store takes it as it is. One made
    with the plain constructor is validated by the store, as ``settle`` does.
    """

    occurrence_id: str
    owner_id: str
    fence: int
    outcome: Literal["succeeded", "failed", "snoozed"]
    result: Any = None
    error: Any = None
    retryable: bool = True
    retry_at: int | None = None
    # Set only by checked(): the canonical JSON of the result (succeeded) or error (failed).
    result_json: str | None = field(default=None, init=False, repr=False, compare=False)
    error_json: str | None = field(default=None, init=False, repr=False, compare=False)
    is_checked: bool = field(default=False, init=False, repr=False, compare=False)

    @classmethod
    def checked(
        cls,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        outcome: Literal["succeeded", "failed", "snoozed"],
        result: Any = None,
        error: Any = None,
        retryable: bool = True,
        retry_at: int | None = None,
    ) -> Settlement:
        """A validated settlement (``SCHEDULER_INVALID_ARGUMENT`` otherwise), in the reference's
        order: the lease holder first, then the outcome. The result or error JSON is walked and
        encoded once, here."""
        key = normalize_identifier(occurrence_id, "occurrenceId")
        owner = normalize_identifier(owner_id, "ownerId")
        token = normalize_positive_int(fence, "fence")
        if outcome not in ("succeeded", "failed", "snoozed"):
            raise InvalidArgument("outcome must be succeeded or failed")
        if outcome == "snoozed" and retry_at is None:
            raise InvalidArgument("a snoozed settlement needs retry_at")
        if type(retryable) is not bool:
            raise InvalidArgument("retryable must be a boolean")
        result_json = canonical_json(result, "result") if outcome == "succeeded" else None
        error_json = (
            canonical_json(DEFAULT_EXECUTION_ERROR if error is None else error, "error")
            if outcome != "succeeded"
            else None
        )
        retry = None
        if outcome != "succeeded" and retry_at is not None:
            retry = normalize_epoch_ms(retry_at, "retryAt")
        settlement = cls(key, owner, token, outcome, result, error, retryable, retry)
        object.__setattr__(settlement, "result_json", result_json)
        object.__setattr__(settlement, "error_json", error_json)
        object.__setattr__(settlement, "is_checked", True)
        return settlement

    def check(self) -> Settlement:
        """This settlement validated (itself when it already is)."""
        if self.is_checked:
            return self
        return Settlement.checked(
            occurrence_id=self.occurrence_id,
            owner_id=self.owner_id,
            fence=self.fence,
            outcome=self.outcome,
            result=self.result,
            error=self.error,
            retryable=self.retryable,
            retry_at=self.retry_at,
        )


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

    occurred_time = UtcTime("occurred_at")


@dataclass(frozen=True, slots=True)
class MigrationRecord:
    version: int
    name: str
    checksum: str
    applied_at: int

    applied_time = UtcTime("applied_at")


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """What :meth:`Store.schema_info` reports: identity, version and the newest migration."""

    application_id: int
    schema_version: int
    migration: MigrationRecord
    migrations: tuple[MigrationRecord, ...] = field(default=())


# -- operator reads ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OccurrencePage:
    """One page of :meth:`~jobledger.Store.list_occurrences`, newest first.

    ``next_cursor`` is ``None`` on the last page; pass it back as ``cursor`` for the next one.
    """

    items: tuple[Occurrence, ...]
    next_cursor: str | None


# What operators' reads (the CLI, the dashboard, /metrics) count each (kind, status) up to.
COUNT_CAP = 1_000


@dataclass(frozen=True, slots=True)
class OccurrenceCount:
    """How many occurrences of ``kind`` are in ``status``; ``capped``: the count stopped at the
    cap it was asked with (:meth:`~jobledger.Store.count_occurrences`), and the true number is
    at least ``count``."""

    kind: str
    status: str
    count: int
    capped: bool = False


@dataclass(frozen=True, slots=True)
class DueItem:
    """The claimable occurrence the next claim of a (queue, kind) lane takes: its highest
    priority, then the most overdue."""

    kind: str
    occurrence_id: str
    job_id: str
    status: str
    due_at: int
    queue: str = DEFAULT_QUEUE
    priority: int = 0

    due_time = UtcTime("due_at")


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """An owner holding live leases, with how many and when they expire."""

    owner_id: str
    leases: int
    earliest_expiry: int
    latest_expiry: int

    earliest_expiry_time = UtcTime("earliest_expiry")
    latest_expiry_time = UtcTime("latest_expiry")


@dataclass(frozen=True, slots=True)
class ThroughputBucket:
    """Settlements of one kind in one minute (``minute`` is epoch ms at the minute's start)."""

    minute: int
    kind: str
    succeeded: int
    retried: int
    dead_lettered: int

    minute_time = UtcTime("minute")


# A worker not seen for this long counts as stale on the dashboard and in metrics (six of its
# default heartbeats).
WORKER_STALE_AFTER = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker as it announced itself (``info``: kinds, concurrency, version, …)."""

    worker_id: str
    hostname: str
    pid: int
    started_at: int
    last_seen_at: int
    stopped_at: int | None
    info: dict[str, Any]

    started_time = UtcTime("started_at")
    last_seen_time = UtcTime("last_seen_at")
    stopped_time = UtcTimeOrNone("stopped_at")


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An operator action whose subject may no longer exist (a removed job, pruned history)."""

    audit_id: int
    occurred_at: int
    action: str
    actor: str
    subject: str | None
    data: dict[str, Any]

    occurred_time = UtcTime("occurred_at")


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What :meth:`~jobledger.Store.prune` removed (each batch is also in the audit log)."""

    before: int
    occurrences: int
    events: int
    requeues: int
    batches: int
    by_status: dict[str, int] = field(default_factory=dict)

    before_time = UtcTime("before")


@dataclass(frozen=True, slots=True)
class VerifyCheck:
    name: str
    ok: bool
    details: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What :meth:`~jobledger.Store.verify` found; ``ok`` when every check passed."""

    checks: tuple[VerifyCheck, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)
