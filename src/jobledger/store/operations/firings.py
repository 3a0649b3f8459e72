"""New firings of jobs: their identity, their insert rows, their ``occurrence_enqueued`` event.

What an enqueue writes, built once and shared by every path that writes it: the store's
enqueue (one or many), the planner's recorded slots, and PostgreSQL's one-statement enqueue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import contract
from ...models import Occurrence
from .. import common, inputs, rows
from ..tx import Tx
from .base import JobMeta

__all__ = [
    "Firing",
    "enqueued_event",
    "enqueued_event_data",
    "firing_of",
    "insert_firings",
    "insert_params",
    "insert_tags",
    "new_occurrence",
]


def insert_params(firing: Firing, now: int | None) -> dict[str, Any]:
    """One row of ``insert_occurrences_from_jobs`` (and the parameters PostgreSQL's one-statement
    enqueue shares with it): a new firing of a job at ``meta``'s revision. ``payload_json``
    ``None`` snapshots the job's payload; ``queue``/``priority`` ``None`` the job's; ``now``
    ``None`` lets the statement read the database clock."""
    request = firing.request
    params: dict[str, Any] = {
        "occurrence_id": firing.occurrence_id,
        "job_id": request.job_id,
        "job_revision": firing.meta.revision,
        "trigger_key": request.trigger_key,
        "scheduled_for": request.scheduled_for,
        "available_at": request.available_at,
        "payload_json": request.payload_json,
        "workspace_id": firing.meta.workspace_id,
        "queue": request.queue,
        "priority": request.priority,
        "partition_key": request.partition,
        "trace_json": request.trace_json,
        "tags_json": request.tags_json,
        "meta_json": request.meta_json,
        "now": now,
    }
    return params


@dataclass(frozen=True, slots=True)
class Firing:
    """A new firing of a job at ``meta``'s revision, with its deterministic identity."""

    request: inputs.EnqueueInput
    meta: JobMeta
    occurrence_id: str


def firing_of(request: inputs.EnqueueInput, meta: JobMeta) -> Firing:
    occurrence_id, _ = contract.occurrence_identity(
        request.job_id, meta.revision, request.scheduled_for, request.trigger_key
    )
    return Firing(request, meta, occurrence_id)


def insert_firings(
    tx: Tx, now: int, firings: Sequence[Firing]
) -> dict[str, tuple[Occurrence, dict[str, Any]]]:
    """Insert new firings in one statement. Returns, by occurrence id, each one inserted with its
    ``occurrence_enqueued`` event; a firing that exists already, or whose job is no longer at
    that revision (or enabled), is absent — the caller decides what that means."""
    if not firings:
        return {}
    rows_in = [insert_params(firing, now) for firing in firings]
    found = tx.all("insert_occurrences_from_jobs", tx.table(rows_in))
    inserted = {row["occurrence_id"] for row in found}
    tagged = {
        firing.occurrence_id: firing.request.tags for firing in firings if firing.request.tags
    }
    if tagged:
        insert_tags(tx, [(int(row["seq"]), tagged.get(row["occurrence_id"], ())) for row in found])
    return {
        firing.occurrence_id: (new_occurrence(firing, now), enqueued_event(firing, now))
        for firing in firings
        if firing.occurrence_id in inserted
    }


def insert_tags(tx: Tx, tagged: Sequence[tuple[int, Sequence[str]]]) -> None:
    """Index new occurrences (by seq) under their tags: one ``jobledger_tags`` row per tag."""
    pairs = [{"tag": tag, "seq": seq} for seq, tags in tagged for tag in tags]
    if pairs:
        tx.run("insert_tags", tx.table(pairs))


def enqueued_event(firing: Firing, now: int) -> dict[str, Any]:
    """The ``occurrence_enqueued`` event of a new firing (``insert_events`` parameters)."""
    return common.event_params(
        job_id=firing.request.job_id,
        occurrence_id=firing.occurrence_id,
        event_type="occurrence_enqueued",
        occurred_at=now,
        data_json=enqueued_event_data(firing),
    )


def enqueued_event_data(firing: Firing) -> str:
    """The canonical data of ``occurrence_enqueued`` (keys in canonical order)."""
    request = firing.request
    return (
        f'{{"jobRevision":{firing.meta.revision},"scheduledFor":{request.scheduled_for},'
        f'"triggerKey":{contract.json_string(request.trigger_key)}}}'
    )


def new_occurrence(firing: Firing, now: int) -> Occurrence:
    """The occurrence an enqueue just inserted, built from what it wrote (no read-back)."""
    request, meta = firing.request, firing.meta
    return Occurrence(
        id=firing.occurrence_id,
        job_id=request.job_id,
        job_revision=meta.revision,
        idempotency_key=rows.idempotency_key_of(firing.occurrence_id),
        trigger_key=request.trigger_key,
        scheduled_for=request.scheduled_for,
        available_at=request.available_at,
        status="queued",
        attempt=0,
        max_attempts=meta.max_attempts,
        fence=0,
        lease_owner=None,
        lease_expires_at=None,
        authority=meta.authority,
        payload=(
            contract.parse_stored_json(meta.payload_json)
            if request.payload_json is None
            else request.payload
        ),
        last_error=None,
        result=None,
        created_at=now,
        updated_at=now,
        settled_at=None,
        kind=meta.kind,
        queue=meta.queue if request.queue is None else request.queue,
        priority=meta.priority if request.priority is None else request.priority,
        partition=request.partition,
        on_lost_lease="adjudicate" if meta.on_lost_lease == "adjudicate" else "retry",
        trace_context=rows.read_trace_context(request.trace_json),
        tags=request.tags,
        meta=None if request.meta_json is None else rows.read_meta(request.meta_json),
    )
