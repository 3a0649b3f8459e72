"""What each page shows, gathered through the :class:`~jobledger.Store` protocol (no SQL).

One function per page returns a plain dataclass the template renders; nothing here knows about
HTTP. The round trips are counted on purpose: the overview makes six reads
(``count_occurrences``, ``throughput``, ``oldest_due``, ``list_workers``, ``lease_holders``,
``schema_info``); the jobs page one ``list_jobs`` plus one ``list_occurrences(limit=1)`` per job
shown (its last run), so it pages 50 jobs at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from markupsafe import Markup

from ..contract import LIVE_STATUSES, OCCURRENCE_STATUSES
from ..errors import NotFound, SchedulerError
from ..models import (
    COUNT_CAP,
    WORKER_STALE_AFTER,
    DueItem,
    Event,
    FlowGraph,
    Job,
    LeaseHolder,
    Occurrence,
    OccurrencePage,
    ParentState,
    QueueDepth,
    SchemaInfo,
    WorkerRecord,
)
from ..planning.explain import Explanation, explain
from ..planning.waiting import WaitReason, limit_words, queue_reasons, why_waiting
from ..schedules import Cron, parse_schedule
from ..schedules.json_format import is_schedule_json
from ..store.base import Store
from . import formatting
from .charts import Minute, failure_chart, per_minute, throughput_chart, window
from .timeline import TimelineEntry, build_timeline

__all__ = [
    "KINDS_SHOWN",
    "OLDEST_DUE_SHOWN",
    "STATUSES",
    "JobRow",
    "Overview",
    "QueuePageView",
    "QueueRow",
    "WorkerView",
    "job_page",
    "job_rows",
    "occurrence_page",
    "overview",
    "queue_page",
    "queue_rows",
    "shown_kinds",
]

STATUSES = OCCURRENCE_STATUSES
HOUR_MS = 3_600_000
STALE_AFTER_MS = WORKER_STALE_AFTER // timedelta(milliseconds=1)
NEXT_FIRES_SHOWN = 3
# The overview's per-kind tables stay one screenful however many kinds a store has seen (2,000
# kinds made a 2.4 MB page, refreshed every few seconds): the rest are one summed row.
KINDS_SHOWN = 50
OLDEST_DUE_SHOWN = 20


@dataclass(frozen=True, slots=True)
class WorkerView:
    record: WorkerRecord
    state: str  # active | stale | stopped
    leases: LeaseHolder | None

    @property
    def kinds(self) -> list[str]:
        kinds = self.record.info.get("kinds")
        return [str(kind) for kind in kinds] if isinstance(kinds, list) else []

    @property
    def concurrency(self) -> Any:
        return self.record.info.get("concurrency", "—")


@dataclass(frozen=True, slots=True)
class Overview:
    now: int
    kinds: list[str]  # the kinds with a row, by name (at most KINDS_SHOWN)
    counts: dict[tuple[str, str], int]
    totals: dict[str, int]
    minutes: list[Minute]
    throughput_svg: Markup
    failure_svg: Markup
    oldest_due: list[DueItem]  # the most overdue first (at most OLDEST_DUE_SHOWN)
    workers: list[WorkerView]
    other_holders: list[LeaseHolder]
    schema: SchemaInfo | None
    kind_count: int = 0  # every kind with occurrences
    more_counts: dict[str, int] = field(default_factory=dict)  # by status, kinds without a row
    more_due: int = 0  # kinds with due work left out of oldest_due
    # (kind, status) counts that stopped at COUNT_CAP: the true number is at least the count.
    capped: frozenset[tuple[str, str]] = frozenset()

    @property
    def capped_statuses(self) -> frozenset[str]:
        """Statuses whose total is a lower bound (a kind's count in it reached the cap)."""
        return frozenset(status for _, status in self.capped)

    def at_least(self, kind: str | None, status: str | None = None) -> str:
        """ "≥" before a count that is a lower bound: a kind's in a status, a status's total
        (``kind=None``), a kind's row total (``status=None``) or the grand total (neither)."""
        if kind is None and status is None:
            bound = bool(self.capped)
        elif kind is None:
            bound = status in self.capped_statuses
        elif status is None:
            bound = any(k == kind for k, _ in self.capped)
        else:
            bound = (kind, status) in self.capped
        return "≥" if bound else ""

    @property
    def more_kinds(self) -> int:
        return self.kind_count - len(self.kinds)

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @property
    def hour_settled(self) -> int:
        return sum(minute.total for minute in self.minutes)

    @property
    def hour_failed(self) -> int:
        return sum(minute.failed for minute in self.minutes)

    @property
    def hour_failure_rate(self) -> float | None:
        settled = self.hour_settled
        return None if settled == 0 else 100 * self.hour_failed / settled

    @property
    def active_workers(self) -> int:
        return sum(1 for worker in self.workers if worker.state == "active")


def shown_kinds(counts: dict[tuple[str, str], int], limit: int = KINDS_SHOWN) -> list[str]:
    """Every kind when there are at most ``limit``, else the ``limit`` with the most live work,
    then dead letters, then occurrences — by name either way."""
    kinds = sorted({kind for kind, _ in counts})
    if len(kinds) <= limit:
        return kinds

    def weight(kind: str) -> tuple[int, int, int, str]:
        live = sum(counts.get((kind, status), 0) for status in LIVE_STATUSES)
        total = sum(counts.get((kind, status), 0) for status in STATUSES)
        return (-live, -counts.get((kind, "dead_letter"), 0), -total, kind)

    return sorted(sorted(kinds, key=weight)[:limit])


def overview(store: Store) -> Overview:
    now = store.now()
    counts: dict[tuple[str, str], int] = {}
    capped: set[tuple[str, str]] = set()
    for row in store.count_occurrences(cap=COUNT_CAP):
        counts[(row.kind, row.status)] = counts.get((row.kind, row.status), 0) + row.count
        if row.capped:
            capped.add((row.kind, row.status))
    kinds = shown_kinds(counts)
    shown = set(kinds)
    totals = dict.fromkeys(STATUSES, 0)
    more = dict.fromkeys(STATUSES, 0)
    for (kind, status), count in counts.items():
        totals[status] = totals.get(status, 0) + count
        if kind not in shown:
            more[status] = more.get(status, 0) + count
    due = sorted(store.oldest_due(), key=lambda item: (item.due_at, item.kind))
    since = window(now)
    minutes = per_minute(store.throughput(since=since), since)
    holders = {holder.owner_id: holder for holder in store.lease_holders()}
    workers = []
    for record in store.list_workers(stopped_since=now - HOUR_MS):
        if record.stopped_at is not None:
            state = "stopped"
        elif now - record.last_seen_at > STALE_AFTER_MS:
            state = "stale"
        else:
            state = "active"
        workers.append(WorkerView(record, state, holders.get(record.worker_id)))
    order = {"active": 0, "stale": 1, "stopped": 2}
    workers.sort(key=lambda view: (order[view.state], view.record.worker_id))
    known = {view.record.worker_id for view in workers}
    return Overview(
        now=now,
        kinds=kinds,
        counts=counts,
        totals=totals,
        minutes=minutes,
        throughput_svg=throughput_chart(minutes),
        failure_svg=failure_chart(minutes),
        oldest_due=due[:OLDEST_DUE_SHOWN],
        workers=workers,
        other_holders=[holder for owner, holder in sorted(holders.items()) if owner not in known],
        schema=store.schema_info(),
        kind_count=len({kind for kind, _ in counts}),
        more_counts=more,
        more_due=max(0, len(due) - OLDEST_DUE_SHOWN),
        capped=frozenset(capped),
    )


@dataclass(frozen=True, slots=True)
class JobRow:
    job: Job
    schedule: str | None  # in words; None: enqueued by callers
    next_fires: list[int]
    last: Occurrence | None
    problem: str | None = None


def schedule_zone(trigger: object) -> str | None:
    """The zone a cron schedule's wall times are in (``None`` for UTC and other triggers)."""
    zone = trigger.timezone if isinstance(trigger, Cron) else None
    return None if zone in (None, "UTC") else zone


def job_row(job: Job, now: int, last: Occurrence | None) -> JobRow:
    """The schedule in words, its next fire times after ``now`` and any problem reading it."""
    if not is_schedule_json(job.trigger):
        return JobRow(job, None, [], last)
    try:
        parsed = parse_schedule(job.trigger)
    except SchedulerError as exc:
        return JobRow(job, "unreadable schedule", [], last, exc.message)
    if parsed is None:
        return JobRow(job, None, [], last)
    trigger = parsed[0]
    fires: list[int] = []
    if job.enabled:
        slot = trigger.next_after(now)
        while slot is not None and len(fires) < NEXT_FIRES_SHOWN:
            fires.append(slot)
            slot = trigger.next_after(slot)
    return JobRow(job, trigger.describe(), fires, last)


def job_rows(store: Store, jobs: list[Job], now: int) -> list[JobRow]:
    rows = []
    for job in jobs:
        page = store.list_occurrences(job_id=job.id, limit=1)
        rows.append(job_row(job, now, page.items[0] if page.items else None))
    return rows


@dataclass(frozen=True, slots=True)
class JobPage:
    job: Job
    explanation: Explanation
    recent: OccurrencePage
    activity: list[TimelineEntry]


JOB_EVENT_TYPES = ("job_created", "job_updated", "schedule_slots_skipped")


def job_page(store: Store, job_id: str) -> JobPage:
    job = store.get_job(job_id)
    if job is None:
        raise NotFound(f"Scheduler job does not exist: {job_id}", details={"jobId": job_id})
    explanation = explain(store, job_id, count=10)
    recent = store.list_occurrences(job_id=job_id, limit=10)
    events: list[Event] = []
    for event_type in JOB_EVENT_TYPES:
        events += store.events(job_id=job_id, event_type=event_type, limit=20)
    activity = build_timeline(events)[-30:]
    return JobPage(job, explanation, recent, list(reversed(activity)))


@dataclass(frozen=True, slots=True)
class OccurrencePageView:
    occurrence: Occurrence
    job: Job | None
    timeline: list[TimelineEntry]
    older: int | None  # before_id for the previous page of events, or None
    newer: bool
    events_shown: int = 0
    flags: list[str] = field(default_factory=list)
    graph: FlowGraph | None = None  # its flow (SPEC §10), when it has parents or children
    parents: list[ParentState] = field(default_factory=list)
    # An outcome-unknown dead letter nobody decided: it is adjudicated, not requeued (SPEC §9).
    awaits_decision: bool = False


TIMELINE_PAGE = 200
# The most occurrences of a flow one occurrence page reads (its graph says when there are more).
FLOW_GRAPH_NODES = 300


def occurrence_page(store: Store, occurrence_id: str, before: int | None) -> OccurrencePageView:
    occurrence = store.get_occurrence(occurrence_id)
    if occurrence is None:
        raise NotFound(
            f"Scheduler occurrence does not exist: {occurrence_id}",
            details={"occurrenceId": occurrence_id},
        )
    events = store.events(occurrence_id=occurrence_id, before_id=before, limit=TIMELINE_PAGE + 1)
    more = len(events) > TIMELINE_PAGE
    events = events[:TIMELINE_PAGE]
    older = min(event.event_id for event in events) if more and events else None
    flags = []
    expires = occurrence.lease_expires_at
    if occurrence.status == "running" and expires is not None and expires <= store.now():
        flags.append("lease expired: the next claim takes it over")
    reasons = why_waiting(store, occurrence, when=formatting.utc)
    flags += [f"Not running: {reason.text}" for reason in reasons]
    graph = store.flow_graph(occurrence_id, limit=FLOW_GRAPH_NODES)
    case = (
        store.get_adjudication_case(occurrence_id) if occurrence.status == "dead_letter" else None
    )
    return OccurrencePageView(
        occurrence=occurrence,
        job=store.get_job(occurrence.job_id),
        timeline=build_timeline(events),
        older=older,
        newer=before is not None,
        events_shown=len(events),
        flags=flags,
        graph=graph if len(graph.nodes) > 1 else None,
        parents=store.parent_states(occurrence_id) if occurrence.parents else [],
        awaits_decision=case is not None and case.eligible,
    )


@dataclass
class QueueRow:
    """One queue on the queues page: its depth (bounded counts), limits in words, and what
    holds it back now."""

    depth: QueueDepth
    limits: list[str]
    holding_back: list[WaitReason]

    def count(self, field: str) -> str:
        """A count for people: ``10000+`` when it reached the store's cap."""
        value = int(getattr(self.depth, field))
        return f"{value}+" if field in self.depth.capped else str(value)


def queue_rows(store: Store) -> list[QueueRow]:
    """Every queue that is declared or holds live work (one ``queue_depths`` read)."""
    return [
        QueueRow(depth, limit_words(depth.queue), queue_reasons(depth, formatting.utc))
        for depth in store.queue_depths()
    ]


QUEUE_PAGE_ROWS = 20


@dataclass(frozen=True, slots=True)
class QueuePageView:
    """One queue's page: its row on the queues page (depth, limits, what holds it back), its
    running occurrences, its waiting ones with why each waits, and its newest occurrences."""

    row: QueueRow
    running: OccurrencePage
    waiting: list[tuple[Occurrence, list[WaitReason]]]
    recent: OccurrencePage
    more_waiting: bool = False


def queue_page(store: Store, name: str) -> QueuePageView:
    """A queue that is declared or has occurrences (else ``SCHEDULER_NOT_FOUND``). Reads: one
    ``queue_depths`` for the queue, three pages of its occurrences (the queue index: running,
    queued, newest), and the reasons of the queued ones shown."""
    recent = store.list_occurrences(queue=name, limit=QUEUE_PAGE_ROWS)
    if store.get_queue(name) is None and not recent.items:
        raise NotFound(f"Scheduler queue does not exist: {name}", details={"queue": name})
    [depth] = store.queue_depths(names=[name])
    row = QueueRow(depth, limit_words(depth.queue), queue_reasons(depth, formatting.utc))
    running = store.list_occurrences(queue=name, status="running", limit=QUEUE_PAGE_ROWS)
    queued = store.list_occurrences(queue=name, status="queued", limit=QUEUE_PAGE_ROWS)
    waiting = [(o, why_waiting(store, o, when=formatting.utc)) for o in queued.items]
    return QueuePageView(row, running, waiting, recent, queued.next_cursor is not None)
