"""Turning stored rows into models, once per fetch.

Rows the store wrote itself are trusted: their JSON is parsed (as an ECMAScript engine would
read it, every number a double) but not re-validated, so a read costs one parse per JSON
column. Whether stored data still matches the contract (authority envelopes, JSON shapes) is
checked on demand by :meth:`jobledger.Store.verify`, which uses :func:`read_stored_authority`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import contract
from ..authority import normalize_authority
from ..errors import DataCorrupt, InvalidArgument
from ..models import QUEUE_LIMIT_KEYS, Event, Job, Occurrence, Progress, Queue, Rate

__all__ = [
    "event_from_row",
    "idempotency_key_of",
    "job_from_row",
    "occurrence_from_row",
    "queue_from_row",
    "read_authority",
    "read_stored_authority",
    "read_stored_json",
    "read_trace_context",
]


def read_stored_json(encoded: object, what: str) -> Any:
    if not isinstance(encoded, str):
        raise DataCorrupt(f"Stored {what} is not valid JSON")
    try:
        return contract.parse_stored_json(encoded)
    except ValueError as exc:
        raise DataCorrupt(f"Stored {what} is not valid JSON") from exc


def _read_object(encoded: object, what: str) -> dict[str, Any]:
    value = read_stored_json(encoded, what)
    if type(value) is not dict:
        raise DataCorrupt(f"Stored {what} is not a JSON object")
    return value


def read_stored_authority(encoded: object, what: str) -> dict[str, Any]:
    """Parse *and validate* a stored authority envelope (for verification)."""
    value = read_stored_json(encoded, what)
    try:
        return normalize_authority(value)
    except InvalidArgument as exc:
        raise DataCorrupt(f"Stored {what} does not match authority envelope v1") from exc


def job_from_row(row: Mapping[str, Any]) -> Job:
    return Job(
        id=row["job_id"],
        kind=row["kind"],
        trigger=read_stored_json(row["trigger_json"], "job trigger"),
        payload=read_stored_json(row["payload_json"], "job payload"),
        authority=_read_object(row["authority_json"], "job authority"),
        enabled=bool(row["enabled"]),
        revision=int(row["revision"]),
        max_attempts=int(row["max_attempts"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        queue=row["queue"],
        priority=int(row["priority"]),
        on_lost_lease=row["on_lost_lease"],
        run_revision=int(row["run_revision"]),
        declared=(
            None
            if row["declared_json"] is None
            else read_stored_json(row["declared_json"], "job declaration")
        ),
        operator_fields=tuple(read_stored_json(row["operator_set_json"], "job operator fields")),
    )


def read_authority(encoded: object) -> dict[str, Any]:
    """A stored authority envelope (``jobledger_authorities``), parsed."""
    return _read_object(encoded, "occurrence authority")


def idempotency_key_of(occurrence_id: str) -> str:
    """``scheduler:v1:<hex>``: the same digest as the occurrence id (``occ_<hex>``), which is why
    schema v4 no longer stores it."""
    return "scheduler:v1:" + occurrence_id[4:]


def occurrence_from_row(
    row: Mapping[str, Any],
    *,
    authority: dict[str, Any],
    deduplicated: bool = False,
    job: Job | None = None,
    reclaimed: bool = False,
    parents: tuple[str, ...] = (),
) -> Occurrence:
    """An occurrence from its row; ``authority`` is its ``authority_id``'s envelope (authorities
    are stored once: the store resolves and caches them)."""
    last_error = row["last_error_json"]
    result = row["result_json"]
    lease_expires_at = row["lease_expires_at"]
    settled_at = row["settled_at"]
    return Occurrence(
        id=row["occurrence_id"],
        job_id=row["job_id"],
        job_revision=int(row["job_revision"]),
        idempotency_key=idempotency_key_of(row["occurrence_id"]),
        trigger_key=row["trigger_key"],
        scheduled_for=int(row["scheduled_for"]),
        available_at=int(row["available_at"]),
        status=row["status"],
        attempt=int(row["attempt"]),
        max_attempts=int(row["max_attempts"]),
        fence=int(row["fence"]),
        lease_owner=row["lease_owner"],
        lease_expires_at=None if lease_expires_at is None else int(lease_expires_at),
        authority=authority,
        payload=read_stored_json(row["payload_json"], "occurrence payload"),
        last_error=None if last_error is None else read_stored_json(last_error, "occurrence error"),
        result=None if result is None else read_stored_json(result, "occurrence result"),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        settled_at=None if settled_at is None else int(settled_at),
        deduplicated=deduplicated,
        kind=row["kind"],
        job=job,
        reclaimed=reclaimed,
        queue=row["queue"],
        priority=int(row["priority"]),
        partition=row["partition_key"],
        on_lost_lease="adjudicate" if row["adjudicate"] else "retry",
        snoozes=int(row["snoozes"]),
        parents=parents,
        on_parent_failure=row["on_parent_failure"],
        trace_context=read_trace_context(row["trace_json"]),
        started_at=None if row["started_at"] is None else int(row["started_at"]),
        tags=read_tags(row["tags_json"]),
        meta=None if row["meta_json"] is None else read_meta(row["meta_json"]),
        progress=read_progress(row["progress_json"]),
    )


def read_tags(encoded: str | None) -> tuple[str, ...]:
    """A stored ``tags_json`` (a JSON list of strings), or no tags."""
    if encoded is None:
        return ()
    value = read_stored_json(encoded, "occurrence tags")
    if type(value) is not list or any(type(tag) is not str for tag in value):
        raise DataCorrupt("Stored occurrence tags are not a JSON list of strings")
    return tuple(value)


def read_meta(encoded: str) -> dict[str, Any]:
    """A stored ``meta_json`` (a JSON object)."""
    value = read_stored_json(encoded, "occurrence meta")
    if type(value) is not dict:
        raise DataCorrupt("Stored occurrence meta is not a JSON object")
    return value


def read_progress(encoded: str | None) -> Progress | None:
    """A stored ``progress_json`` (what ``ctx.progress`` wrote), or ``None``."""
    if encoded is None:
        return None
    value = read_stored_json(encoded, "occurrence progress")
    if type(value) is not dict:
        raise DataCorrupt("Stored occurrence progress is not a JSON object")
    try:
        return Progress(
            done=value["done"],
            total=value.get("total"),
            message=value.get("message"),
            attempt=int(value["attempt"]),
            at=int(value["at"]),
        )
    except (KeyError, TypeError, ValueError):
        raise DataCorrupt("Stored occurrence progress is not one ctx.progress wrote") from None


def read_trace_context(encoded: str | None) -> dict[str, str] | None:
    """A stored ``trace_json`` (written only by the store, from a validated W3C trace
    context), parsed; ``None`` when the enqueue was not traced — the common case costs
    nothing."""
    if encoded is None:
        return None
    value = read_stored_json(encoded, "occurrence trace context")
    if type(value) is not dict:
        raise DataCorrupt("Stored occurrence trace context is not a JSON object")
    return value


def event_from_row(row: Mapping[str, Any]) -> Event:
    data = read_stored_json(row["data_json"], "event data")
    fence = row["fence"]
    return Event(
        event_id=int(row["event_id"]),
        job_id=row["job_id"],
        occurrence_id=row["occurrence_id"],
        type=row["event_type"],
        occurred_at=int(row["occurred_at"]),
        owner_id=row["owner_id"],
        fence=None if fence is None else int(fence),
        data=data,
    )


def queue_from_row(row: Mapping[str, Any]) -> Queue:
    rate_limit, rate_per = row["rate_limit"], row["rate_per_ms"]
    partition_limit, partition_per = row["partition_rate_limit"], row["partition_rate_per_ms"]
    return Queue(
        name=row["name"],
        concurrency=_optional_int(row["concurrency"]),
        worker_concurrency=_optional_int(row["worker_concurrency"]),
        partition_concurrency=_optional_int(row["partition_concurrency"]),
        rate=None if rate_limit is None else Rate.from_ms(int(rate_limit), int(rate_per)),
        partition_rate=(
            None
            if partition_limit is None
            else Rate.from_ms(int(partition_limit), int(partition_per))
        ),
        paused=bool(row["paused"]),
        paused_reason=row["paused_reason"],
        paused_at=_optional_int(row["paused_at"]),
        paused_by=row["paused_by"],
        revision=int(row["revision"]),
        created_at=int(row["created_at"]),
        updated_at=int(row["updated_at"]),
        sources=queue_sources(row),
    )


def queue_sources(row: Mapping[str, Any]) -> dict[str, str]:
    """Where each limit of a stored queue came from (``Queue.sources``, SPEC §14)."""
    operator = set(read_stored_json(row["operator_set_json"], "queue operator fields"))
    declared = row["declared_json"] is not None
    limits = {
        "concurrency": row["concurrency"],
        "worker_concurrency": row["worker_concurrency"],
        "partition_concurrency": row["partition_concurrency"],
        "rate": row["rate_limit"],
        "partition_rate": row["partition_rate_limit"],
    }
    return {
        name: "operator"
        if QUEUE_LIMIT_KEYS[name] in operator
        else "declaration"
        if declared or value is not None
        else "default"
        for name, value in limits.items()
    }


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
