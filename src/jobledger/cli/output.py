"""The JSON shapes of ``--json`` and the tables shared by several commands.

Keys are camelCase, as in the stored JSON and in :meth:`Explanation.to_dict
<jobledger.planning.explain.Explanation.to_dict>`; instants are ISO 8601 UTC strings
(``2026-01-01T09:00:00Z``, with ``.mmm`` when there are milliseconds), whatever ``--tz`` says.
These shapes are a public contract for scripts: keys are added, never renamed or removed.

Tables show occurrence ids short (:func:`short_id`: ``occ_`` and 12 hex digits), which every
command taking an occurrence accepts (a unique start of an id); ``--json`` has them whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import SchedulerError
from ..models import AuditRecord, Event, Job, Occurrence, Progress, SchemaInfo
from ..schedules import parse_schedule
from .context import Context
from .table import Column, render_table, status_style
from .timefmt import iso_utc

__all__ = [
    "SHORT_ID_LENGTH",
    "audit_json",
    "describe_trigger",
    "error_json",
    "event_json",
    "event_row_line",
    "events_table",
    "job_json",
    "occurrence_json",
    "occurrences_table",
    "progress_text",
    "schema_json",
    "short_id",
]

# ``occ_`` and 12 hex digits (48 bits): unique in any store of a realistic size, and as long as
# the dashboard's short ids.
SHORT_ID_LENGTH = 16


def short_id(occurrence_id: str | None) -> str:
    """An occurrence id cut for a table (``-`` for none); commands accept it back as a prefix."""
    return "-" if occurrence_id is None else occurrence_id[:SHORT_ID_LENGTH]


def describe_trigger(trigger: Any) -> str | None:
    """The schedule in words (``every 5 seconds``), ``None`` for a job enqueued by callers."""
    try:
        parsed = parse_schedule(trigger)
    except SchedulerError as exc:
        return f"unreadable schedule ({exc.message})"
    return None if parsed is None else parsed[0].describe()


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "kind": job.kind,
        "enabled": job.enabled,
        "revision": job.revision,
        "maxAttempts": job.max_attempts,
        "schedule": describe_trigger(job.trigger),
        "trigger": job.trigger,
        "payload": job.payload,
        "authority": job.authority,
        "createdAt": iso_utc(job.created_at),
        "updatedAt": iso_utc(job.updated_at),
        # SPEC §14: fields an operator set, which stand against the app's unchanged declaration
        "operatorFields": list(job.operator_fields),
    }


def occurrence_json(occurrence: Occurrence) -> dict[str, Any]:
    return {
        "id": occurrence.id,
        "jobId": occurrence.job_id,
        "jobRevision": occurrence.job_revision,
        "kind": occurrence.kind,
        "status": occurrence.status,
        "triggerKey": occurrence.trigger_key,
        "idempotencyKey": occurrence.idempotency_key,
        "scheduledFor": iso_utc(occurrence.scheduled_for),
        "availableAt": iso_utc(occurrence.available_at),
        "attempt": occurrence.attempt,
        "maxAttempts": occurrence.max_attempts,
        "fence": occurrence.fence,
        "leaseOwner": occurrence.lease_owner,
        "leaseExpiresAt": iso_utc(occurrence.lease_expires_at),
        "payload": occurrence.payload,
        "authority": occurrence.authority,
        "lastError": occurrence.last_error,
        "result": occurrence.result,
        "createdAt": iso_utc(occurrence.created_at),
        "updatedAt": iso_utc(occurrence.updated_at),
        "settledAt": iso_utc(occurrence.settled_at),
        "startedAt": iso_utc(occurrence.started_at),
        "queue": occurrence.queue,
        "priority": occurrence.priority,
        "partition": occurrence.partition,
        "tags": list(occurrence.tags),
        "meta": occurrence.meta,
        "progress": (
            None
            if occurrence.progress is None
            else {**occurrence.progress.to_json(), "at": iso_utc(occurrence.progress.at)}
        ),
    }


def progress_text(progress: Progress) -> str:
    """``3 of 10 (30%) — charging, attempt 2``: what a handler reported with ctx.progress."""
    return progress.text()


def event_json(event: Event) -> dict[str, Any]:
    return {
        "eventId": event.event_id,
        "type": event.type,
        "occurredAt": iso_utc(event.occurred_at),
        "jobId": event.job_id,
        "occurrenceId": event.occurrence_id,
        "ownerId": event.owner_id,
        "fence": event.fence,
        "data": event.data,
    }


def audit_json(record: AuditRecord) -> dict[str, Any]:
    return {
        "auditId": record.audit_id,
        "occurredAt": iso_utc(record.occurred_at),
        "action": record.action,
        "actor": record.actor,
        "subject": record.subject,
        "data": record.data,
    }


def schema_json(info: SchemaInfo) -> dict[str, Any]:
    return {
        "applicationId": info.application_id,
        "schemaVersion": info.schema_version,
        "migrations": [
            {
                "version": m.version,
                "name": m.name,
                "checksum": m.checksum,
                "appliedAt": iso_utc(m.applied_at),
            }
            for m in (info.migrations or (info.migration,))
        ],
    }


def error_json(error: SchedulerError) -> dict[str, Any]:
    return {"code": error.code, "message": error.message, "details": error.details}


def _short_error(error: Any) -> str:
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
        return ": ".join(str(part) for part in (code, message) if part)
    return "" if error is None else str(error)


def occurrences_table(
    ctx: Context,
    occurrences: Sequence[Occurrence],
    *,
    show_job: bool = True,
    show_kind: bool = True,
) -> str:
    """Occurrences, one per line. ``show_job`` / ``show_kind`` False leave out a column that a
    filter makes the same on every line, so the lease or last error has the room."""
    columns = [
        (True, Column("OCCURRENCE", shrink=False)),
        (show_job, Column("JOB", max_width=32)),
        (show_kind, Column("KIND", max_width=24)),
        (True, Column("STATUS", style=status_style)),
        (True, Column("SCHEDULED FOR", shrink=False)),
        (True, Column("ATTEMPT", align="right")),
        (True, Column("LEASE / LAST ERROR", max_width=100)),
    ]
    rows = []
    for o in occurrences:
        if o.status == "running" and o.lease_owner is not None:
            extra = f"{o.lease_owner} until {ctx.when(o.lease_expires_at)}"
        else:
            extra = _short_error(o.last_error)
        cells = [
            short_id(o.id),
            o.job_id,
            o.kind,
            o.status,
            ctx.when(o.scheduled_for),
            f"{o.attempt}/{o.max_attempts}",
            extra,
        ]
        rows.append([cell for (shown, _), cell in zip(columns, cells, strict=True) if shown])
    kept = [column for shown, column in columns if shown]
    return render_table(kept, rows, width=ctx.width, color=ctx.color)


_INSTANT_KEYS = frozenset(
    {"scheduledFor", "retryAt", "leaseExpiresAt", "availableAt", "first", "last", "before"}
)


def _event_summary(ctx: Context, event: Event) -> str:
    """The event's data as ``key=value`` pairs, instants in the ``--tz`` zone."""

    def shown(key: str, value: Any) -> str:
        if key in _INSTANT_KEYS and type(value) is int:
            return ctx.when(value)
        if isinstance(value, list):
            return ",".join(str(item) for item in value)
        return str(value)

    data = event.data
    keys: list[str] = [
        key
        for key in ("actor", "reason", "attempt", "previousOwner", "retryAt", "changedFields")
        if key in data and data[key] not in (None, [], "")
    ] or sorted(data)
    return " ".join(f"{key}={shown(key, data[key])}" for key in keys)


def events_table(
    ctx: Context,
    events: Sequence[Event],
    *,
    show_job: bool = True,
    show_occurrence: bool = True,
) -> str:
    """Events, one per line. ``show_job`` / ``show_occurrence`` False leave out a column that is
    the same on every line (one occurrence's timeline, a ``--job`` filter), so the data fits."""
    columns = [
        (True, Column("ID", align="right", shrink=False)),
        (True, Column("AT", shrink=False)),
        (True, Column("TYPE")),
        (show_job, Column("JOB", max_width=28)),
        (show_occurrence, Column("OCCURRENCE", shrink=False)),
        (True, Column("OWNER", max_width=28)),
        (True, Column("DATA", max_width=100)),
    ]
    rows = []
    for event in events:
        cells = [
            str(event.event_id),
            ctx.when(event.occurred_at),
            event.type,
            event.job_id,
            short_id(event.occurrence_id),
            event.owner_id or "-",
            _event_summary(ctx, event),
        ]
        rows.append([cell for (shown, _), cell in zip(columns, cells, strict=True) if shown])
    kept = [column for shown, column in columns if shown]
    return render_table(kept, rows, width=ctx.width, color=ctx.color)


def event_row_line(ctx: Context, event: Event) -> str:
    """One event as one line (``history --follow`` prints them as they come)."""
    parts = [ctx.when(event.occurred_at), f"#{event.event_id}", event.type, event.job_id]
    if event.occurrence_id:
        parts.append(short_id(event.occurrence_id))
    if event.owner_id:
        parts.append(f"owner={event.owner_id}")
    summary = _event_summary(ctx, event)
    if summary:
        parts.append(summary)
    return " ".join(parts)
