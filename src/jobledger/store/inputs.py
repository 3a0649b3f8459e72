"""Validating what callers pass to the store, before anything is read or written.

Every store operation normalizes its arguments here first (the reference's rules, in the
reference's order), so a bad argument raises ``SCHEDULER_INVALID_ARGUMENT`` and changes nothing,
and both stores refuse exactly the same inputs.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from .. import contract
from ..authority import normalize_authority
from ..errors import InvalidArgument
from ..models import MAX_PAGE_LIMIT, UNSET, EnqueueRequest, Renewal, Settlement
from .annotations import (
    idempotency_trigger_key,
    normalize_meta,
    normalize_progress,
    normalize_tag,
    normalize_tags,
)

__all__ = [
    "EnqueueInput",
    "JobInput",
    "idempotency_trigger_key",
    "normalize_batch_limit",
    "normalize_enqueue",
    "normalize_enqueue_batch",
    "normalize_job_input",
    "normalize_job_patch",
    "normalize_kinds",
    "normalize_lease_holder",
    "normalize_limit",
    "normalize_meta",
    "normalize_optional_identifier",
    "normalize_page_limit",
    "normalize_progress",
    "normalize_queues",
    "normalize_renewals",
    "normalize_requeue_args",
    "normalize_settlements",
    "normalize_status",
    "normalize_tag",
    "normalize_tags",
    "normalize_trace_context",
]

MAX_REASON_LENGTH = 2000

# Python keyword → the field name stored in JSON and events (the reference's camelCase).
PATCH_FIELDS = {
    "kind": "kind",
    "trigger": "trigger",
    "payload": "payload",
    "authority": "authority",
    "enabled": "enabled",
    "max_attempts": "maxAttempts",
    "queue": "queue",
    "priority": "priority",
    "on_lost_lease": "onLostLease",
}
# What a patch may change without making the job's live occurrences stale (SPEC §14): only the
# job's kind (what runs) and authority (on whose behalf) bind an occurrence. Queue and priority
# are snapshotted at enqueue (SPEC §7), the payload too; a new max_attempts is carried onto the
# live occurrences by the update itself (see JobOperations.update_job).
RUN_NEUTRAL_FIELDS = frozenset(
    {"trigger", "payload", "enabled", "max_attempts", "queue", "priority", "on_lost_lease"}
)


def normalize_boolean(value: object, field: str) -> bool:
    if type(value) is not bool:
        raise InvalidArgument(f"{field} must be a boolean")
    return value


def normalize_source(value: object) -> str:
    """Who sets a job's or a queue's values (SPEC §14): code (``"declaration"``) or an
    ``"operator"``, whose values stand against an unchanged declaration."""
    if value not in ("declaration", "operator"):
        raise InvalidArgument(
            "source must be 'declaration' or 'operator'", details={"field": "source"}
        )
    return str(value)


def normalize_optional_identifier(value: object, field: str, max_length: int = 256) -> str | None:
    return (
        None
        if value is None
        else contract.normalize_identifier(value, field, max_length=max_length)
    )


# -- jobs ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobInput:
    id: str
    kind: str
    trigger: Any
    payload: Any
    authority: dict[str, Any]
    enabled: bool
    max_attempts: int
    queue: str = contract.DEFAULT_QUEUE
    priority: int = 0
    on_lost_lease: str = "retry"


def validate_trigger(trigger: Any, field: str = "job.trigger") -> None:
    """Refuse a trigger that claims to be a jobledger schedule but is malformed.

    Any other JSON stays opaque to the store, as in the reference.
    """
    from ..schedules import validate_trigger_json

    try:
        validate_trigger_json(trigger)
    except InvalidArgument as exc:
        raise InvalidArgument(
            f"{field} is not a valid jobledger schedule: {exc.message}", details=exc.details
        ) from None


def normalize_job_input(
    *,
    id: object,
    kind: object,
    authority: object,
    trigger: object,
    payload: object,
    enabled: object,
    max_attempts: object,
    queue: object = contract.DEFAULT_QUEUE,
    priority: object = 0,
    on_lost_lease: object = "retry",
) -> JobInput:
    job = JobInput(
        id=contract.normalize_identifier(id, "job.id"),
        kind=contract.normalize_identifier(kind, "job.kind", max_length=128),
        trigger=contract.normalize_json({} if trigger is None else trigger, "job.trigger"),
        payload=contract.normalize_json(payload, "job.payload"),
        authority=normalize_authority(authority),
        enabled=normalize_boolean(enabled, "job.enabled"),
        max_attempts=contract.normalize_max_attempts(max_attempts),
        queue=contract.normalize_queue_name(queue, "job.queue"),
        priority=contract.normalize_priority(priority, "job.priority"),
        on_lost_lease=contract.normalize_lost_lease_policy(on_lost_lease, "job.on_lost_lease"),
    )
    validate_trigger(job.trigger)
    return job


def normalize_job_patch(patch: object) -> tuple[dict[str, Any], list[str]]:
    """Validate a patch; return (normalized values by Python name, changedFields for the event)."""
    if not isinstance(patch, Mapping):
        raise InvalidArgument("job patch must be an object")
    unknown = sorted(str(key) for key in patch if key not in PATCH_FIELDS)
    if unknown:
        raise InvalidArgument("job patch contains unknown fields", details={"fields": unknown})
    if not patch:
        raise InvalidArgument("job patch must not be empty")
    normalized: dict[str, Any] = {}
    if "kind" in patch:
        normalized["kind"] = contract.normalize_identifier(
            patch["kind"], "job.kind", max_length=128
        )
    if "trigger" in patch:
        normalized["trigger"] = contract.normalize_json(patch["trigger"], "job.trigger")
        validate_trigger(normalized["trigger"])
    if "payload" in patch:
        normalized["payload"] = contract.normalize_json(patch["payload"], "job.payload")
    if "authority" in patch:
        normalized["authority"] = normalize_authority(patch["authority"])
    if "enabled" in patch:
        normalized["enabled"] = normalize_boolean(patch["enabled"], "job.enabled")
    if "max_attempts" in patch:
        normalized["max_attempts"] = contract.normalize_max_attempts(patch["max_attempts"])
    if "queue" in patch:
        normalized["queue"] = contract.normalize_queue_name(patch["queue"], "job.queue")
    if "priority" in patch:
        normalized["priority"] = contract.normalize_priority(patch["priority"], "job.priority")
    if "on_lost_lease" in patch:
        normalized["on_lost_lease"] = contract.normalize_lost_lease_policy(
            patch["on_lost_lease"], "job.on_lost_lease"
        )
    changed = sorted(PATCH_FIELDS[key] for key in patch)
    return normalized, changed


# -- enqueue ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueueInput:
    """A validated firing: ``payload_json`` is ``None`` when the job's payload is snapshotted."""

    job_id: str
    scheduled_for: int
    trigger_key: str
    available_at: int
    payload: Any
    payload_json: str | None
    once_per_trigger: bool
    match_payload: bool = False
    queue: str | None = None
    priority: int | None = None
    partition: str | None = None
    trace_json: str | None = None
    after: tuple[str, ...] = ()
    on_parent_failure: str | None = None
    tags: tuple[str, ...] = ()
    tags_json: str | None = None
    meta_json: str | None = None


# W3C Trace Context: traceparent "version-traceid-parentid-flags" in lowercase hex; tracestate
# at most 512 characters of visible ASCII (https://www.w3.org/TR/trace-context/).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{0,512}")
_TRACE_FIELDS = ("traceparent", "tracestate")


def normalize_trace_context(value: object) -> str | None:
    """A W3C trace context (``{"traceparent": …, "tracestate": …}``) as the JSON text stored in
    ``occurrences.trace_json``; ``None`` stores none."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or any(key not in _TRACE_FIELDS for key in value):
        raise InvalidArgument(
            "trace_context must be a W3C trace context: {'traceparent': …, 'tracestate': …}",
            details={"field": "trace_context"},
        )
    parent, state = value.get("traceparent"), value.get("tracestate", "")
    if not isinstance(parent, str) or _TRACEPARENT.fullmatch(parent) is None:
        raise InvalidArgument(
            "trace_context.traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)",
            details={"field": "trace_context.traceparent"},
        )
    if not isinstance(state, str) or _TRACESTATE.fullmatch(state) is None:
        raise InvalidArgument(
            "trace_context.tracestate must be at most 512 printable ASCII characters",
            details={"field": "trace_context.tracestate"},
        )
    fields = {"traceparent": parent, **({"tracestate": state} if state else {})}
    return contract.canonical_json(fields)


def normalize_parents(
    after: object, on_parent_failure: object
) -> tuple[tuple[str, ...], str | None]:
    """SPEC §10's ``after=``: distinct parent occurrence ids in the order given (at most
    :data:`~jobledger.contract.MAX_PARENTS`), and the child's policy (``"cancel"`` by default;
    ``None`` when there are no parents)."""
    if isinstance(after, (str, bytes)) or not isinstance(after, (list, tuple)):
        raise InvalidArgument("after must be a list of occurrence ids", details={"field": "after"})
    parents = tuple(
        dict.fromkeys(contract.normalize_identifier(parent, "after") for parent in after)
    )
    if len(parents) > contract.MAX_PARENTS:
        raise InvalidArgument(
            f"an occurrence may wait for at most {contract.MAX_PARENTS} parents",
            details={"field": "after", "count": len(parents), "limit": contract.MAX_PARENTS},
        )
    if not parents:
        if on_parent_failure is not None:
            contract.normalize_parent_failure_policy(on_parent_failure)
        return (), None
    policy = "cancel" if on_parent_failure is None else on_parent_failure
    return parents, contract.normalize_parent_failure_policy(policy)


def normalize_enqueue(
    job_id: object,
    scheduled_for: object,
    trigger_key: object,
    available_at: object,
    payload: object,
    *,
    once_per_trigger: bool,
    match_payload: bool = False,
    queue: object = None,
    priority: object = None,
    partition: object = None,
    trace_context: object = None,
    after: object = (),
    on_parent_failure: object = None,
    tags: object = None,
    meta: object = None,
) -> EnqueueInput:
    key = contract.normalize_identifier(job_id, "jobId")
    scheduled = contract.normalize_epoch_ms(scheduled_for, "scheduledFor")
    trigger = contract.normalize_identifier(trigger_key, "triggerKey")
    available = contract.normalize_epoch_ms(
        scheduled if available_at is None else available_at, "availableAt"
    )
    if payload is UNSET:
        value, text = None, None
    else:
        value = contract.normalize_json(payload, "occurrence.payload")
        text = contract.encode_trusted_json(value)
    parents, policy = normalize_parents(after, on_parent_failure)
    tag_list, tags_json = normalize_tags(tags)
    meta_json = normalize_meta(meta)
    return EnqueueInput(
        key,
        scheduled,
        trigger,
        available,
        value,
        text,
        once_per_trigger,
        match_payload,
        queue=None if queue is None else contract.normalize_queue_name(queue),
        priority=None if priority is None else contract.normalize_priority(priority),
        partition=None if partition is None else contract.normalize_partition(partition),
        trace_json=normalize_trace_context(trace_context),
        after=parents,
        on_parent_failure=policy,
        tags=tag_list,
        tags_json=tags_json,
        meta_json=meta_json,
    )


def normalize_enqueue_batch(requests: object) -> list[EnqueueInput]:
    """Validate a whole batch before anything is written; the failing index is in details."""
    if not isinstance(requests, (list, tuple)):
        raise InvalidArgument("requests must be a list of EnqueueRequest")
    if len(requests) > contract.MAX_ENQUEUE_BATCH:
        raise InvalidArgument(
            f"an enqueue batch holds at most {contract.MAX_ENQUEUE_BATCH} requests",
            details={"count": len(requests), "limit": contract.MAX_ENQUEUE_BATCH},
        )
    normalized: list[EnqueueInput] = []
    for index, item in enumerate(requests):
        if not isinstance(item, EnqueueRequest):
            raise InvalidArgument(
                f"requests[{index}] must be an EnqueueRequest", details={"index": index}
            )
        try:
            normalized.append(
                normalize_enqueue(
                    item.job_id,
                    item.scheduled_for,
                    item.trigger_key,
                    item.available_at,
                    item.payload,
                    once_per_trigger=normalize_boolean(item.once_per_trigger, "oncePerTrigger"),
                    match_payload=normalize_boolean(item.match_payload, "matchPayload"),
                    queue=item.queue,
                    priority=item.priority,
                    partition=item.partition,
                    trace_context=item.trace_context,
                    after=item.after,
                    on_parent_failure=item.on_parent_failure,
                    tags=None if not item.tags else item.tags,
                    meta=item.meta,
                )
            )
        except InvalidArgument as exc:
            # A tag's or meta's reason stays in the details (the others keep theirs as before).
            reason = {
                key: value
                for key, value in (exc.details or {}).items()
                if (exc.details or {}).get("field") in ("tags", "meta")
            }
            raise InvalidArgument(
                f"requests[{index}]: {exc.message}", details={**reason, "index": index}
            ) from exc
    return normalized


# -- reads --------------------------------------------------------------------------------------


def normalize_limit(value: object, *, default: int = 2) -> int:
    """listOccurrencesByTrigger's lenient limit: non-integers fall back, clamp to 1..200."""
    if type(value) is bool or not isinstance(value, (int, float)) or float(value) != int(value):
        return default
    return max(1, min(int(value), contract.MAX_HISTORY_LIMIT))


def normalize_page_limit(value: object) -> int:
    """A page size for listings: 1..1000."""
    limit = contract.normalize_positive_int(value, "limit")
    if limit > MAX_PAGE_LIMIT:
        raise InvalidArgument(f"limit must be at most {MAX_PAGE_LIMIT}")
    return limit


def normalize_status(value: object) -> str | None:
    if value is None:
        return None
    if value not in contract.OCCURRENCE_STATUSES:
        raise InvalidArgument(
            "status must be one of " + ", ".join(contract.OCCURRENCE_STATUSES),
            details={"field": "status"},
        )
    return str(value)


def normalize_kinds(job_kind: object, kinds: object) -> list[str] | None:
    """The kinds a claim may take (sorted, unique), or ``None`` for every kind."""
    if job_kind is not None and kinds is not None:
        raise InvalidArgument("pass job_kind or kinds, not both")
    if job_kind is not None:
        return [contract.normalize_identifier(job_kind, "jobKind", max_length=128)]
    if kinds is None:
        return None
    if isinstance(kinds, str) or not isinstance(kinds, Collection):
        raise InvalidArgument("kinds must be a collection of job kinds (not a string)")
    if not kinds:
        raise InvalidArgument("kinds must not be empty (pass None for every kind)")
    return sorted({contract.normalize_identifier(k, "kinds", max_length=128) for k in kinds})


def normalize_queues(queues: object, field: str = "queues") -> list[str] | None:
    """The queues a claim may take from (sorted, unique), or ``None`` for every queue."""
    if queues is None:
        return None
    if isinstance(queues, str) or not isinstance(queues, Collection):
        raise InvalidArgument(
            f"{field} must be a collection of queue names (not a string)", details={"field": field}
        )
    if not queues:
        raise InvalidArgument(
            f"{field} must not be empty (pass None for every queue)", details={"field": field}
        )
    return sorted({contract.normalize_queue_name(q, field) for q in queues})


# -- leases -------------------------------------------------------------------------------------


def normalize_batch_limit(value: object) -> int:
    """How many occurrences one batch may claim: an integer from 1 to ``MAX_BATCH_SIZE``."""
    limit = contract.normalize_positive_int(value, "limit")
    if limit > contract.MAX_BATCH_SIZE:
        raise InvalidArgument(f"limit must be at most {contract.MAX_BATCH_SIZE}")
    return limit


def normalize_lease_holder(
    occurrence_id: object, owner_id: object, fence: object
) -> tuple[str, str, int]:
    """The (occurrence, owner, fence) triple every write under a lease presents."""
    return (
        contract.normalize_identifier(occurrence_id, "occurrenceId"),
        contract.normalize_identifier(owner_id, "ownerId"),
        contract.normalize_positive_int(fence, "fence"),
    )


def normalize_settle_request(
    *,
    occurrence_id: object,
    owner_id: object,
    fence: object,
    outcome: object,
    result: object,
    error: object,
    retryable: object,
    retry_at: object,
) -> Settlement:
    """Validate settle's arguments in the reference's order (lease holder first)."""
    return Settlement.checked(
        occurrence_id=occurrence_id,  # type: ignore[arg-type]
        owner_id=owner_id,  # type: ignore[arg-type]
        fence=fence,  # type: ignore[arg-type]
        outcome=outcome,  # type: ignore[arg-type]
        result=result,
        error=error,
        retryable=retryable,  # type: ignore[arg-type]
        retry_at=retry_at,  # type: ignore[arg-type]
    )


def normalize_settlements(settlements: object) -> list[Settlement]:
    """Validate a whole batch before anything is written; each occurrence at most once."""
    if not isinstance(settlements, (list, tuple)):
        raise InvalidArgument("settlements must be a list of Settlement")
    if len(settlements) > contract.MAX_BATCH_SIZE:
        raise InvalidArgument(f"settlements must hold at most {contract.MAX_BATCH_SIZE} items")
    requests: list[Settlement] = []
    seen: set[str] = set()
    for index, item in enumerate(settlements):
        if not isinstance(item, Settlement):
            raise InvalidArgument(
                f"settlements[{index}] must be a Settlement", details={"index": index}
            )
        try:
            request = item.check()
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"settlements[{index}]: {exc.message}", details={"index": index}
            ) from exc
        if request.occurrence_id in seen:
            raise InvalidArgument(
                f"settlements[{index}] settles {request.occurrence_id} a second time",
                details={"index": index},
            )
        seen.add(request.occurrence_id)
        requests.append(request)
    return requests


def normalize_renewals(renewals: object) -> list[tuple[str, str, int, int]]:
    """Validate a renew batch: (occurrence, owner, fence, lease_ms) each, occurrences unique."""
    if not isinstance(renewals, (list, tuple)):
        raise InvalidArgument("renewals must be a list of Renewal")
    if len(renewals) > contract.MAX_BATCH_SIZE:
        raise InvalidArgument(f"renewals must hold at most {contract.MAX_BATCH_SIZE} items")
    normalized: list[tuple[str, str, int, int]] = []
    seen: set[str] = set()
    for index, item in enumerate(renewals):
        if not isinstance(item, Renewal):
            raise InvalidArgument(f"renewals[{index}] must be a Renewal", details={"index": index})
        try:
            key, owner, fence = normalize_lease_holder(
                item.occurrence_id, item.owner_id, item.fence
            )
            lease = contract.normalize_lease_ms(item.lease_ms)
        except InvalidArgument as exc:
            raise InvalidArgument(
                f"renewals[{index}]: {exc.message}", details={"index": index}
            ) from exc
        if key in seen:
            raise InvalidArgument(
                f"renewals[{index}] renews {key} a second time", details={"index": index}
            )
        seen.add(key)
        normalized.append((key, owner, fence, lease))
    return normalized


def normalize_starts(starts: object, settled: set[str]) -> list[tuple[str, str, int, int]]:
    """Validate the starts of a settle batch (as renewals), none of them settled in it too."""
    if not isinstance(starts, (list, tuple)):
        raise InvalidArgument("starts must be a list of Renewal", details={"field": "starts"})
    normalized = normalize_renewals(starts)
    for index, (key, _, _, _) in enumerate(normalized):
        if key in settled:
            raise InvalidArgument(
                f"starts[{index}] starts {key}, which the batch settles",
                details={"index": index, "field": "starts"},
            )
    return normalized


def normalize_requeue_args(
    *, occurrence_id: object, expected_fence: object, reason: object, actor: object
) -> tuple[str, int, str, str]:
    occurrence = contract.normalize_identifier(occurrence_id, "occurrenceId")
    fence = contract.normalize_positive_int(expected_fence, "expectedFence")
    why = contract.normalize_identifier(reason, "reason", max_length=MAX_REASON_LENGTH)
    who = contract.normalize_identifier(actor, "actor")
    return occurrence, fence, why, who


def normalize_actor_reason(actor: object, reason: object) -> tuple[str, str]:
    """Who did an operator action and why (both recorded in the audit log)."""
    return (
        contract.normalize_identifier(actor, "actor"),
        contract.normalize_identifier(reason, "reason", max_length=MAX_REASON_LENGTH),
    )
