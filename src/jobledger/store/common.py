"""Store logic that does not depend on the SQL dialect.

Both stores validate arguments, decide transitions and shape audit events here, so the two can
only differ in *how* they read and write rows, never in *what* they decide.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import contract
from ..errors import DataCorrupt, InvalidArgument, LeaseLost
from ..models import Event, Job, Occurrence, Settlement
from .base import UNSET

__all__ = [
    "JobInput",
    "SettlePlan",
    "claim_event",
    "event_from_row",
    "job_from_row",
    "lease_lost",
    "load_queries",
    "normalize_job_input",
    "normalize_job_patch",
    "occurrence_from_row",
    "plan_settle",
]

LEASE_EXPIRED_ERROR = {
    "code": "lease_expired",
    "message": "Execution lease expired after the final allowed attempt",
}
DEFAULT_EXECUTION_ERROR = {"code": "execution_failed", "message": "Execution failed"}
MAX_REASON_LENGTH = 2000
LAZY_DEAD_LETTER_BATCH = 100

# Python keyword → the field name stored in JSON and events (the reference's camelCase).
_PATCH_FIELDS = {
    "kind": "kind",
    "trigger": "trigger",
    "payload": "payload",
    "authority": "authority",
    "enabled": "enabled",
    "max_attempts": "maxAttempts",
}


# -- SQL files --------------------------------------------------------------------------------

_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def load_queries(path: Path) -> dict[str, str]:
    """Read a ``queries.sql`` file made of ``-- name: <query>`` blocks into ``{name: sql}``."""
    text = path.read_text(encoding="utf-8")
    parts = _NAME_LINE.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"duplicate query name {name!r} in {path}")
        queries[name] = body.strip().rstrip(";")
    return queries


def migration_checksum(ddl: str) -> str:
    """A migration's checksum, as the reference computes it: SHA-256 of the trimmed DDL text
    with CRLF line ends turned into LF. The same rule for every dialect."""
    return hashlib.sha256(ddl.strip().replace("\r\n", "\n").encode("utf-8")).hexdigest()


# -- argument normalization --------------------------------------------------------------------


def _normalize_boolean(value: object, field: str) -> bool:
    if type(value) is not bool:
        raise InvalidArgument(f"{field} must be a boolean")
    return value


@dataclass(frozen=True, slots=True)
class JobInput:
    id: str
    kind: str
    trigger: Any
    payload: Any
    authority: dict[str, Any]
    enabled: bool
    max_attempts: int

    def trigger_json(self) -> str:
        return contract.canonical_json(self.trigger, "job.trigger")

    def payload_json(self) -> str:
        return contract.canonical_json(self.payload, "job.payload")

    def authority_json(self) -> str:
        return contract.canonical_json(self.authority, "job.authority")


def normalize_job_input(
    *,
    id: object,
    kind: object,
    authority: object,
    trigger: object,
    payload: object,
    enabled: object,
    max_attempts: object,
) -> JobInput:
    return JobInput(
        id=contract.normalize_identifier(id, "job.id"),
        kind=contract.normalize_identifier(kind, "job.kind", max_length=128),
        trigger=contract.normalize_json({} if trigger is None else trigger, "job.trigger"),
        payload=contract.normalize_json(payload, "job.payload"),
        authority=contract.normalize_authority(authority),
        enabled=_normalize_boolean(enabled, "job.enabled"),
        max_attempts=contract.normalize_max_attempts(max_attempts),
    )


def normalize_job_patch(patch: object) -> tuple[dict[str, Any], list[str]]:
    """Validate a patch; return (normalized values by Python name, changedFields for the event)."""
    if not isinstance(patch, Mapping):
        raise InvalidArgument("job patch must be an object")
    unknown = sorted(str(key) for key in patch if key not in _PATCH_FIELDS)
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
    if "payload" in patch:
        normalized["payload"] = contract.normalize_json(patch["payload"], "job.payload")
    if "authority" in patch:
        normalized["authority"] = contract.normalize_authority(patch["authority"])
    if "enabled" in patch:
        normalized["enabled"] = _normalize_boolean(patch["enabled"], "job.enabled")
    if "max_attempts" in patch:
        normalized["max_attempts"] = contract.normalize_max_attempts(patch["max_attempts"])
    changed = sorted(_PATCH_FIELDS[key] for key in patch)
    return normalized, changed


def normalize_payload_override(payload: object) -> str | None:
    """Canonical payload text of an enqueue override, or ``None`` when not given."""
    if payload is UNSET:
        return None
    return contract.canonical_json(payload, "occurrence.payload")


def normalize_optional_identifier(value: object, field: str, max_length: int = 256) -> str | None:
    return (
        None
        if value is None
        else contract.normalize_identifier(value, field, max_length=max_length)
    )


def normalize_limit(value: object, *, default: int = 2) -> int:
    """listOccurrencesByTrigger's lenient limit: non-integers fall back, clamp to 1..200."""
    if type(value) is bool or not isinstance(value, (int, float)) or float(value) != int(value):
        return default
    return max(1, min(int(value), contract.MAX_HISTORY_LIMIT))


@dataclass(frozen=True, slots=True)
class SettleRequest:
    """A validated settle: the lease it presents and the outcome, already encoded as JSON."""

    occurrence_id: str
    owner_id: str
    fence: int
    outcome: str
    result_json: str | None
    error_json: str | None
    retryable: bool
    retry_at: int | None


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
) -> SettleRequest:
    """Validate settle's arguments in the reference's order (lease holder first)."""
    key, owner, token = normalize_lease_holder(occurrence_id, owner_id, fence)
    if outcome not in ("succeeded", "failed"):
        raise InvalidArgument("outcome must be succeeded or failed")
    if type(retryable) is not bool:
        raise InvalidArgument("retryable must be a boolean")
    result_json = contract.canonical_json(result, "result") if outcome == "succeeded" else None
    error_json = (
        contract.canonical_json(DEFAULT_EXECUTION_ERROR if error is None else error, "error")
        if outcome == "failed"
        else None
    )
    retry = None
    if outcome == "failed" and retry_at is not None:
        retry = contract.normalize_epoch_ms(retry_at, "retryAt")
    return SettleRequest(key, owner, token, str(outcome), result_json, error_json, retryable, retry)


def normalize_settlements(settlements: object) -> list[SettleRequest]:
    """Validate a whole batch before anything is written; each occurrence at most once."""
    if not isinstance(settlements, (list, tuple)):
        raise InvalidArgument("settlements must be a list of Settlement")
    if len(settlements) > contract.MAX_BATCH_SIZE:
        raise InvalidArgument(f"settlements must hold at most {contract.MAX_BATCH_SIZE} items")
    requests: list[SettleRequest] = []
    seen: set[str] = set()
    for index, item in enumerate(settlements):
        if not isinstance(item, Settlement):
            raise InvalidArgument(
                f"settlements[{index}] must be a Settlement", details={"index": index}
            )
        try:
            request = normalize_settle_request(
                occurrence_id=item.occurrence_id,
                owner_id=item.owner_id,
                fence=item.fence,
                outcome=item.outcome,
                result=item.result,
                error=item.error,
                retryable=item.retryable,
                retry_at=item.retry_at,
            )
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


def lease_expiry(now: int, lease_ms: int) -> int:
    expires = now + lease_ms
    if expires > contract.MAX_SAFE_INTEGER:
        raise InvalidArgument("lease expiry exceeds the safe integer range")
    return expires


def lease_lost(occurrence_id: str) -> LeaseLost:
    return LeaseLost(
        f"Occurrence lease is absent, expired, or owned by another fence: {occurrence_id}"
    )


# -- decisions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SettlePlan:
    status: str
    event_type: str
    available_at: int
    settled_at: int | None
    result_json: str | None
    last_error_json: str | None
    event_data: dict[str, Any]


def plan_settle(
    *,
    outcome: str,
    retryable: bool,
    retry_at: int | None,
    result_json: str | None,
    error_json: str | None,
    attempt: int,
    max_attempts: int,
    available_at: int,
    now: int,
) -> SettlePlan:
    """Decide where a settled attempt goes and what the audit event says."""
    data: dict[str, Any] = {"attempt": attempt, "maxAttempts": max_attempts}
    if outcome == "succeeded":
        return SettlePlan(
            "succeeded", "occurrence_succeeded", available_at, now, result_json, None, data
        )
    if retryable and attempt < max_attempts:
        next_available = now if retry_at is None else max(now, retry_at)
        data["retryAt"] = next_available
        return SettlePlan(
            "retry_wait", "occurrence_retry_scheduled", next_available, None, None, error_json, data
        )
    return SettlePlan(
        "dead_letter", "occurrence_dead_lettered", available_at, now, None, error_json, data
    )


def claim_event(
    *, claimed: Occurrence, previous_status: str, previous_owner: str | None, targeted: bool
) -> tuple[str, dict[str, Any]]:
    """The event type and data for a claim (reclaimed when the previous status was running)."""
    event_type = "occurrence_reclaimed" if previous_status == "running" else "occurrence_claimed"
    data: dict[str, Any] = {
        "attempt": claimed.attempt,
        "previousOwner": previous_owner,
        "previousStatus": previous_status,
    }
    if targeted:
        data["targeted"] = True
    return event_type, data


# -- row mapping ------------------------------------------------------------------------------


def read_stored_json(encoded: object, what: str) -> Any:
    if not isinstance(encoded, str):
        raise DataCorrupt(f"Stored {what} is not valid JSON")
    try:
        return contract.parse_stored_json(encoded)
    except ValueError as exc:
        raise DataCorrupt(f"Stored {what} is not valid JSON") from exc


def read_stored_authority(encoded: object, what: str) -> dict[str, Any]:
    value = read_stored_json(encoded, what)
    try:
        return contract.normalize_authority(value)
    except InvalidArgument as exc:
        raise DataCorrupt(f"Stored {what} does not match authority envelope v1") from exc


def job_from_row(row: Mapping[str, Any]) -> Job:
    return Job(
        id=row["job_id"],
        kind=row["kind"],
        trigger=read_stored_json(row["trigger_json"], "job trigger"),
        payload=read_stored_json(row["payload_json"], "job payload"),
        authority=read_stored_authority(row["authority_json"], "job authority"),
        enabled=bool(row["enabled"]),
        revision=int(row["revision"]),
        max_attempts=int(row["max_attempts"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def occurrence_from_row(row: Mapping[str, Any], *, deduplicated: bool = False) -> Occurrence:
    last_error = row["last_error_json"]
    result = row["result_json"]
    return Occurrence(
        id=row["occurrence_id"],
        job_id=row["job_id"],
        job_revision=int(row["job_revision"]),
        idempotency_key=row["idempotency_key"],
        trigger_key=row["trigger_key"],
        scheduled_for=int(row["scheduled_for"]),
        available_at=int(row["available_at"]),
        status=row["status"],
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        fence=int(row["fence"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=_optional_int(row["lease_expires_at"]),
        authority=read_stored_authority(row["authority_json"], "occurrence authority"),
        payload=read_stored_json(row["payload_json"], "occurrence payload"),
        last_error=None if last_error is None else read_stored_json(last_error, "occurrence error"),
        result=None if result is None else read_stored_json(result, "occurrence result"),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        settled_at=_optional_int(row["settled_at"]),
        deduplicated=deduplicated,
    )


def event_from_row(row: Mapping[str, Any]) -> Event:
    data = read_stored_json(row["data_json"], "event data")
    return Event(
        event_id=int(row["event_id"]),
        job_id=row["job_id"],
        occurrence_id=row["occurrence_id"],
        type=row["event_type"],
        occurred_at=int(row["occurred_at"]),
        owner_id=row["owner_id"],
        fence=_optional_int(row["fence"]),
        data=data,
    )


def event_json(data: Mapping[str, Any]) -> str:
    return contract.canonical_json(dict(data), "event.data")


def normalize_requeue_args(
    *, occurrence_id: object, expected_fence: object, reason: object, actor: object
) -> tuple[str, int, str, str]:
    occurrence = contract.normalize_identifier(occurrence_id, "occurrenceId")
    fence = contract.normalize_positive_int(expected_fence, "expectedFence")
    why = contract.normalize_identifier(reason, "reason", max_length=MAX_REASON_LENGTH)
    who = contract.normalize_identifier(actor, "actor")
    return occurrence, fence, why, who
