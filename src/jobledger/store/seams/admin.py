"""The Store protocol's operations on jobs, the audit trail, operators' views, queues and
schedules (part of :class:`jobledger.store.base.Store`; the shared rules are in that module's
docstring)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from ...contract import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE
from ...models import (
    DEPTH_CAP,
    AuditRecord,
    DueItem,
    DueSchedules,
    Event,
    Job,
    LeaseHolder,
    Occurrence,
    OccurrenceGate,
    PlanOutcome,
    PruneReport,
    Queue,
    QueueDepth,
    SchedulePlan,
    ScheduleState,
    SlotFiring,
    ThroughputBucket,
    VerifyReport,
    WorkerRecord,
)

__all__ = ["AuditSeam", "JobSeam", "QueueSeam", "ScheduleSeam"]


class JobSeam(Protocol):
    """Jobs: declared work."""

    # -- jobs -----------------------------------------------------------------------------

    def create_job(
        self,
        *,
        id: str,
        kind: str,
        authority: Mapping[str, Any],
        trigger: Any = None,
        payload: Any = None,
        enabled: bool = True,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        actor: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        on_lost_lease: str = "retry",
        declared: Mapping[str, Any] | None = None,
    ) -> Job:
        """Create a job at revision 1 and append ``job_created`` (data ``{revision: 1}``, plus
        ``actor`` when given). ``queue`` and ``priority`` are what its occurrences snapshot
        unless an enqueue names its own (SPEC §7); ``on_lost_lease`` is ``"retry"`` or
        ``"adjudicate"`` (SPEC §9).

        ``trigger`` defaults to ``{}`` and ``payload`` to ``null``. ``authority`` is normalized
        as an authority envelope. A trigger that claims to be a jobledger schedule
        (``"jobledger": "schedule"``) must be a valid one (``SCHEDULER_INVALID_ARGUMENT`` naming
        the field); any other trigger JSON stays opaque. A schedule gets its planner row in the
        same transaction. An existing id raises ``SCHEDULER_CONFLICT``.
        """
        ...

    def get_job(self, job_id: str) -> Job | None:
        """The job, or ``None``."""
        ...

    def update_job(
        self,
        job_id: str,
        *,
        expected_revision: int,
        patch: Mapping[str, Any],
        actor: str | None = None,
        source: str = "operator",
        declared: Mapping[str, Any] | None = None,
    ) -> Job:
        """Compare-and-swap update: apply ``patch`` only if the job is at ``expected_revision``.

        ``source`` (SPEC §14): ``"operator"`` (the default: the CLI, the dashboard) records the
        patched fields as an operator's, which stand against an unchanged declaration
        (``Job.operator_fields``); ``"declaration"`` (``ensure_job``) takes them back and
        records ``declared`` as the declaration last applied (``Job.declared``).

        Patch keys: ``kind, trigger, payload, authority, enabled, max_attempts, queue,
        priority, on_lost_lease`` (non-empty). Always bumps the revision by one. Only a change of
        ``kind`` or ``authority`` makes occurrences enqueued earlier stale for the runtime
        (``Job.run_revision`` moves); any other patch leaves them runnable with their own
        payload, queue and priority (SPEC §14). A new ``max_attempts`` is carried onto the live
        occurrences that follow the job (whose ``max_attempts`` is still its previous value; not
        those a requeue or an adjudication granted attempts), never below what is spent: a
        running attempt still counts, a waiting one keeps the attempt it waits for. The job's
        live occurrences follow its kind, workspace and enabled flag (a disabled job's backlog
        leaves the claim index). A schedule is planned again from this
        instant. Missing job → ``SCHEDULER_NOT_FOUND``; another revision →
        ``SCHEDULER_REVISION_CONFLICT`` with ``{expectedRevision, actualRevision}``. Appends
        ``job_updated`` with ``{fromRevision, toRevision, changedFields}`` (and ``actor``).
        """
        ...

    def record_job_declaration(
        self, job_id: str, *, expected_revision: int, declared: Mapping[str, Any]
    ) -> Job:
        """Record ``declared`` as the declaration last applied from code (``Job.declared``),
        changing nothing else: no new revision, no event (``ensure_job`` when the code declares
        what the job already is, SPEC §14). ``SCHEDULER_NOT_FOUND`` /
        ``SCHEDULER_REVISION_CONFLICT`` as :meth:`update_job`."""
        ...

    def list_jobs(self, *, after: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs ordered by id, at most ``limit`` (1..1000), starting after the id ``after``."""
        ...

    def remove_job(
        self, job_id: str, *, expected_revision: int, actor: str, reason: str
    ) -> dict[str, Any]:
        """Delete a job with no live occurrence, with its settled occurrences and events.

        Refused with ``SCHEDULER_JOB_HAS_LIVE_OCCURRENCES`` while any occurrence is queued,
        running or waiting to retry; ``SCHEDULER_REVISION_CONFLICT`` at another revision. What
        was removed (the definition, counts, actor, reason) is written to the audit log
        (:meth:`audit_log`, ``action="job_removed"``) in the same transaction, and returned.
        """
        ...


class AuditSeam(Protocol):
    """The audit trail and operators' views: statistics, workers, retention."""

    # -- reading the audit trail ----------------------------------------------------------

    def history(
        self,
        *,
        occurrence_id: str | None = None,
        job_id: str | None = None,
        limit: int = 50,
    ) -> list[Event]:
        """Events, newest first, filtered by occurrence and/or job (limit clamped to 200)."""
        ...

    def events(
        self,
        *,
        occurrence_id: str | None = None,
        job_id: str | None = None,
        event_type: str | None = None,
        before_id: int | None = None,
        after_id: int | None = None,
        limit: int = 50,
    ) -> list[Event]:
        """Events filtered by occurrence, job and type, ``limit`` (1..1000) at a time: newest
        first before ``before_id``, or — with only ``after_id`` — oldest first after it (to
        follow the log). Each page is a range of one index: the occurrence's, else the type's
        (with or without a job), else the job's, else the log's own order."""
        ...

    def list_dead_letters(self, *, job_id: str | None = None, limit: int = 50) -> list[Occurrence]:
        """Dead letters, most recently settled first (limit clamped to 200): a range of an index
        that holds dead letters only."""
        ...

    # -- operators: statistics, workers, retention ------------------------------------------

    def lease_holders(self) -> list[LeaseHolder]:
        """Owners holding live leases, with how many and when they expire."""
        ...

    def oldest_due(self, *, kinds: Collection[str] | None = None) -> list[DueItem]:
        """Per kind with claimable work, the most overdue occurrence (what the next claim takes)."""
        ...

    def throughput(self, *, since: int) -> list[ThroughputBucket]:
        """Settlements per minute and kind from ``since`` (epoch ms) on, oldest first."""
        ...

    def register_worker(
        self, *, worker_id: str, hostname: str, pid: int, info: dict[str, Any]
    ) -> None:
        """Record a worker (``info``: kinds, concurrency, …); again after a restart is fine."""
        ...

    def touch_worker(self, worker_id: str) -> None:
        """Record that a worker is alive now."""
        ...

    def stop_worker(self, worker_id: str) -> None:
        """Record that a worker stopped."""
        ...

    def list_workers(self, *, stopped_since: int | None = None) -> list[WorkerRecord]:
        """Workers not stopped, plus those stopped at or after ``stopped_since``."""
        ...

    def prune(
        self,
        *,
        before: int,
        actor: str,
        statuses: Sequence[str] = ("succeeded", "dead_letter", "cancelled"),
        batch_size: int = 2_000,
        max_batches: int | None = None,
        on_batch: Callable[[PruneReport], None] | None = None,
    ) -> PruneReport:
        """Delete settled occurrences settled before ``before`` with their events and requeue
        records, ``batch_size`` per transaction (one statement per table for the batch), each
        batch audited (``action="pruned"``) in its own transaction; ``on_batch`` sees each
        batch's report after its commit. Batches take rows in insertion order, whatever their
        status, up to the first created at or after ``before``. Live occurrences are never
        touched."""
        ...

    def audit_log(self, *, before_id: int | None = None, limit: int = 50) -> list[AuditRecord]:
        """Operator records whose subject may be gone (removed jobs, prunes), newest first."""
        ...

    def verify(self) -> VerifyReport:
        """Check the whole database now — the O(size) checks an open skips: SQLite's
        ``integrity_check`` and foreign keys, the schema catalog, and that every stored
        authority is a valid envelope. Reads only; ``report.ok`` is True when all passed."""
        ...


class QueueSeam(Protocol):
    """Queue declarations and pauses (SPEC §7)."""

    # -- queues (SPEC §7) ---------------------------------------------------------------------

    def get_queue(self, name: str) -> Queue | None:
        """A queue's declaration and pause state, or ``None`` when nobody declared it."""
        ...

    def list_queues(self) -> list[Queue]:
        """Every declared (or paused) queue, by name."""
        ...

    def declare_queue(
        self,
        declaration: Queue,
        *,
        actor: str,
        source: str = "declaration",
        fields: Collection[str] | None = None,
    ) -> Queue:
        """Declare a queue's limits. The pause state is not part of them. A change appends a
        ``queue_updated`` audit record with ``actor`` and ``source``.

        ``source="declaration"`` (code: ``app.queue``) — the declaration is recorded as the last
        applied from code; the same declaration again writes nothing, even if an operator
        changed limits since (their values stand); a changed one applies every limit whose
        declared value changed (omitted limits are ``None``) and keeps an operator's value for
        the others. ``source="operator"`` (``jobledger queue set``) — the limits named in
        ``fields`` (default: all) take the declaration's values and stand until an operator
        changes them. ``Queue.sources`` says where each value came from (SPEC §14)."""
        ...

    def pause_queue(self, name: str, *, reason: str, actor: str) -> Queue:
        """Pause a queue (declaring it if nobody did): no claim takes from it once this
        returns; running work finishes. Appends ``queue_paused`` with actor and reason."""
        ...

    def resume_queue(self, name: str, *, actor: str) -> Queue:
        """Resume a paused queue (appends ``queue_resumed``); a queue not paused is returned as
        it is."""
        ...

    def queue_depths(
        self, *, names: Collection[str] | None = None, cap: int = DEPTH_CAP
    ) -> list[QueueDepth]:
        """Per queue, by name: its declaration (a queue nobody declared has no limits) and its
        ready, waiting, held, running and blocked occurrences — for ``names``, or for every
        queue that is declared or holds live work (at most 1,000). Bounded reads: each count
        stops at ``cap`` (1..1,000,000) rows and ``QueueDepth.capped`` names the counts that
        reached it; waiting and blocked come from one scan of at most ``cap`` rows each across
        all queues. ``rate_claims`` / ``rate_window_end``: the queue's current rate window."""
        ...

    def occurrence_gate(self, occurrence_id: str) -> OccurrenceGate | None:
        """Where an occurrence stands in the claim lane: its gate (``ready``, ``waiting``,
        ``held``; ``None`` unless queued or retrying), and for one with a partition that
        partition's running count and rate window. ``None`` when there is no such occurrence."""
        ...


class ScheduleSeam(Protocol):
    """The planner's operations (store/operations/schedules.py)."""

    # -- schedules (the planner's operations; store/operations/schedules.py) ---------------

    def due_schedules(self, *, limit: int = 500, now: int | None = None) -> DueSchedules:
        """The schedules a planner must look at now, earliest ``next_due_at`` first.

        A schedule is due when its ``next_due_at`` is at or before ``now`` (default: the
        store's now — the database clock on PostgreSQL). At most ``limit`` (1..1000) are
        returned, each with its job. Reads the ``jobledger_schedules_due`` index only, never
        every job: when nothing is due it costs one probe of that index, and the result's
        ``next_due_at`` (the earliest of all schedules, ``None`` when none is waiting) tells the
        caller how long it may sleep.
        """
        ...

    def record_plans(self, plans: Sequence[SchedulePlan]) -> list[PlanOutcome]:
        """Record planning decisions (at most 1000 plans, one per job, 10,000 slots) in one
        transaction; results in input order.

        For each plan, compare-and-swap the job's schedule row on what the planner read
        (``expected_revision``, ``expected_planned_through``, ``expected_last_slot``). If the row
        changed (another planner recorded first, the job was edited or disabled), nothing is
        written for that plan and its outcome says ``applied=False``. Otherwise, atomically:
        set ``planned_through``, ``last_slot`` and ``next_due_at``; enqueue each firing exactly
        as :meth:`enqueue_occurrence` does (identity on job, revision, slot and trigger key, so
        a firing that exists is not enqueued again and is not listed in ``enqueued``); append
        each skipped run to the row's recent skips (the newest 20 are kept) and write one
        job-level ``schedule_slots_skipped`` event per run with ``{first, last, count, reason,
        revision}``. For a ``once`` plan a slot already fired or skipped under any revision is
        neither enqueued nor reported again. Bad plans raise ``SCHEDULER_INVALID_ARGUMENT``
        (``planned_through`` may not move backwards) and change nothing.
        """
        ...

    def record_backfill(
        self,
        job_id: str,
        *,
        expected_revision: int,
        fire: Sequence[SlotFiring],
        start: int,
        end: int,
        actor: str,
    ) -> list[Occurrence]:
        """Enqueue the slots of ``fire`` (all in ``[start, end)``, epoch ms; at most 10,000)
        that no occurrence of the job holds yet — under any revision: a slot is held when an
        occurrence has its instant and trigger key — and append one ``schedule_backfilled``
        audit record (``{jobId, start, end, slots, created, revision}``, ``actor``), in one
        transaction. Returns the occurrences created, in slot order; a repeated or concurrent
        backfill creates nothing twice (the slot's occurrence id is deterministic). Raises
        ``SCHEDULER_NOT_FOUND`` (no such job), ``SCHEDULER_REVISION_CONFLICT`` (the job is no
        longer at ``expected_revision``), ``SCHEDULER_JOB_DISABLED``,
        ``SCHEDULER_INVALID_ARGUMENT`` (a bad range, a slot outside it, more than 10,000), and
        changes nothing then."""
        ...

    def schedule_state(self, job_id: str) -> ScheduleState | None:
        """The job's planning state and the job, or ``None`` when the job has no schedule row
        (missing, or its trigger is not a jobledger schedule)."""
        ...
