"""An occurrence's (or a job's) audit events as a readable timeline.

The store's append-only event log is the source: claims with their fence and owner, renewals,
settlements, lease expiries, releases and operator actions with their actor and reason — not a
story reconstructed from row timestamps. Consecutive renewals of one lease (same owner and
fence) fold into one entry ("renewed ×12"), so a long-running attempt does not bury the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..models import Event

__all__ = ["Detail", "TimelineEntry", "build_timeline"]

Tone = Literal["info", "good", "warn", "bad", "operator", "muted"]

_TITLES: dict[str, tuple[str, Tone]] = {
    "occurrence_enqueued": ("Enqueued", "info"),
    "occurrence_claimed": ("Claimed", "info"),
    "occurrence_reclaimed": ("Reclaimed after the previous lease expired", "warn"),
    "occurrence_renewed": ("Lease renewed", "muted"),
    "occurrence_started": ("Handler started (a claim held ahead)", "muted"),
    "occurrence_succeeded": ("Succeeded", "good"),
    "occurrence_retry_scheduled": ("Failed — retry scheduled", "warn"),
    "occurrence_dead_lettered": ("Dead-lettered", "bad"),
    "occurrence_released": ("Lease given back unfinished", "warn"),
    "occurrence_lease_expired": ("Lease ended: owner gone", "warn"),
    "occurrence_requeued": ("Requeued by an operator", "operator"),
    "occurrence_cancelled": ("Cancelled by an operator", "operator"),
    "occurrence_snoozed": ("Snoozed — the attempt given back", "muted"),
    "occurrence_adjudication_recorded": ("Outcome adjudicated by an operator", "operator"),
    "occurrence_revived": ("Revived: its parent was requeued", "operator"),
    "job_created": ("Job created", "info"),
    "job_updated": ("Job updated", "operator"),
    "schedule_slots_skipped": ("Schedule slots skipped", "warn"),
}
# Event data keys holding epoch milliseconds.
_INSTANT_KEYS = frozenset(
    {"scheduledFor", "retryAt", "leaseExpiresAt", "first", "last", "availableAt", "at", "until"}
)
_LABELS = {
    "actor": "by",
    "reason": "reason",
    "attempt": "attempt",
    "maxAttempts": "of",
    "previousOwner": "previous owner",
    "previousStatus": "was",
    "retryAt": "retry at",
    "leaseExpiresAt": "lease until",
    "scheduledFor": "slot",
    "triggerKey": "trigger key",
    "jobRevision": "job revision",
    "changedFields": "changed",
    "fromRevision": "from revision",
    "toRevision": "to revision",
    "previousMaxAttempts": "max attempts were",
    "requeueId": "requeue #",
    "count": "slots",
    "until": "until",
    "delay": "delay (ms)",
}
# Shown first, in this order; the rest follow alphabetically.
_ORDER = ("actor", "reason", "attempt", "maxAttempts", "retryAt", "leaseExpiresAt")


@dataclass(frozen=True, slots=True)
class Detail:
    """One labelled value of an event; ``instant`` is set when the value is epoch ms."""

    label: str
    text: str
    instant: int | None = None
    emphasis: bool = False


@dataclass(slots=True)
class TimelineEntry:
    """One line of a timeline: an event, or a run of renewals folded together."""

    first: Event
    last: Event
    title: str
    tone: Tone
    details: list[Detail] = field(default_factory=list)
    count: int = 1

    @property
    def type(self) -> str:
        return self.first.type

    @property
    def owner(self) -> str | None:
        return self.first.owner_id

    @property
    def fence(self) -> int | None:
        return self.first.fence


def _text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_text(item) for item in value) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{key}={_text(item)}" for key, item in sorted(value.items()))
    return str(value)


def _details(event: Event) -> list[Detail]:
    data = event.data
    keys = [key for key in _ORDER if key in data]
    keys += sorted(key for key in data if key not in _ORDER)
    details = []
    for key in keys:
        value = data[key]
        if value is None:
            continue  # e.g. no previous owner on a first claim
        if key == "maxAttempts" and "attempt" in data:
            continue  # folded into "attempt n of m" below
        label = _LABELS.get(key, key)
        if key in _INSTANT_KEYS and type(value) is int:
            details.append(Detail(label, "", instant=value))
            continue
        text = _text(value)
        if key == "attempt" and "maxAttempts" in data:
            text = f"{value} of {data['maxAttempts']}"
        details.append(Detail(label, text, emphasis=key in ("actor", "reason")))
    return details


def _entry(event: Event) -> TimelineEntry:
    title, tone = _TITLES.get(event.type, (event.type.replace("_", " ").capitalize(), "info"))
    if event.type == "occurrence_dead_lettered" and event.data.get("reason") == "lease_expired":
        title = "Dead-lettered: the final attempt's lease expired"
    if event.type == "occurrence_dead_lettered" and event.data.get("reason") == "outcome_unknown":
        title = "Dead-lettered: outcome unknown (the worker was lost), waiting for a decision"
    if event.type == "occurrence_cancelled" and event.data.get("reason") == "parent_failed":
        title, tone = "Cancelled: a parent failed", "warn"
    return TimelineEntry(event, event, title, tone, _details(event))


def build_timeline(events: Iterable[Event]) -> list[TimelineEntry]:
    """Entries oldest first (``events`` in any order), renewals of one lease folded."""
    ordered: Sequence[Event] = sorted(events, key=lambda event: event.event_id)
    entries: list[TimelineEntry] = []
    for event in ordered:
        previous = entries[-1] if entries else None
        if (
            event.type == "occurrence_renewed"
            and previous is not None
            and previous.type == "occurrence_renewed"
            and previous.owner == event.owner_id
            and previous.fence == event.fence
        ):
            previous.last = event
            previous.count += 1
            previous.details = _details(event)
            previous.title = f"Lease renewed ×{previous.count}"
            continue
        entries.append(_entry(event))
    return entries
