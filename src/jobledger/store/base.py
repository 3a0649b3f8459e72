"""The storage seam: the :class:`Store` protocol every backend implements.

Two implementations exist: :class:`jobledger.store.sqlite.SQLiteStore` (embedded, the default)
and :class:`jobledger.store.postgres.PostgresStore` (many workers on many machines). Both run the
same conformance suite (``tests/store/``); the contracts below are what that suite checks.

Shared rules for every operation:

* Arguments are validated before anything is read or written, in the reference's order; a bad
  argument raises ``SCHEDULER_INVALID_ARGUMENT`` and changes nothing.
* Every write is one transaction. It either commits entirely — the state change *and* its audit
  event — or not at all. A storage failure raises ``SCHEDULER_STORAGE_UNAVAILABLE`` with
  ``details["commitState"]`` (``"not_committed"`` or ``"unknown"``).
* Instants are epoch milliseconds read from the store's clock **inside** the write transaction,
  so a caller that waited for the write lock cannot act on a stale "now".
* A **lease** is (owner id, fence, expiry). Claiming increments ``attempt`` and ``fence``. Renew
  and settle must present the owner and fence of the current claim and an unexpired lease
  (an expiry equal to now counts as expired), else ``SCHEDULER_LEASE_LOST``.
* After :meth:`Store.close`, calls raise ``SCHEDULER_STORE_CLOSED`` (writes validate their
  arguments first).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..contract import DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE
from ..errors import LeaseLost
from ..models import (
    UNSET,
    AuditRecord,
    DueItem,
    DueSchedules,
    EnqueueRequest,
    Event,
    Job,
    LeaseHolder,
    Occurrence,
    OccurrenceCount,
    OccurrencePage,
    Outcome,
    PlanOutcome,
    PruneReport,
    Queue,
    Renewal,
    SchedulePlan,
    ScheduleState,
    SchemaInfo,
    Settlement,
    ThroughputBucket,
    Unset,
    VerifyReport,
    WorkerRecord,
)

if TYPE_CHECKING:
    from .tx import WorkSignal

__all__ = ["UNSET", "NoOwnerLock", "Outcome", "OwnerLockHandle", "Store", "Unset"]


class OwnerLockHandle(Protocol):
    """A lock held for as long as its owner lives (see :meth:`Store.hold_owner_lock`).

    ``kind`` names the mechanism (``"flock"``, ``"advisory"``, or ``"none"``);
    ``refresh_interval`` how often its owner must call :meth:`refresh` (``None``: never — an
    ``flock`` cannot be lost while its process lives)."""

    kind: str

    @property
    def refresh_interval(self) -> timedelta | None: ...

    @property
    def held(self) -> bool: ...

    def refresh(self) -> None:
        """Check it is still held; take it again if it was lost (e.g. a new session)."""
        ...

    def close(self) -> None: ...


class NoOwnerLock:
    """For stores where no other process can see this owner's leases (``:memory:``)."""

    kind = "none"
    held = True
    refresh_interval = None

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


@runtime_checkable
class Store(Protocol):
    """A durable home for jobs, occurrences and their audit events."""

    @property
    def target(self) -> str:
        """Where the store lives (a file path, ``:memory:`` or a redacted PostgreSQL URL)."""
        ...

    @property
    def work_signal(self) -> WorkSignal:
        """Bumped when work may have become claimable: a latency hint for idle workers."""
        ...

    def now(self) -> int:
        """The store's current instant in epoch ms: its injected clock, or — on PostgreSQL
        without one — the database clock. Use it to compute instants that the store will
        compare with lease expiries and due times, so every machine agrees on "now"."""
        ...

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
    ) -> Job:
        """Compare-and-swap update: apply ``patch`` only if the job is at ``expected_revision``.

        Patch keys: ``kind, trigger, payload, authority, enabled, max_attempts, queue,
        priority, on_lost_lease`` (non-empty). Always bumps the revision by one, so occurrences
        enqueued earlier become stale for the runtime — unless the patch changes only ``queue``
        and/or ``priority`` (``Job.run_revision`` stays): live occurrences keep their snapshot
        and still run. The job's live occurrences follow its kind, workspace and enabled flag (a
        disabled job's backlog leaves the claim index). A schedule is planned again from this
        instant. Missing job → ``SCHEDULER_NOT_FOUND``; another revision →
        ``SCHEDULER_REVISION_CONFLICT`` with ``{expectedRevision, actualRevision}``. Appends
        ``job_updated`` with ``{fromRevision, toRevision, changedFields}`` (and ``actor``).
        """
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

    # -- occurrences ----------------------------------------------------------------------

    def enqueue_occurrence(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
    ) -> Occurrence:
        """Record one firing of a job; idempotent on (job, job revision, scheduled_for, key).

        The occurrence id is derived (:func:`jobledger.derive_occurrence_identity`). A second
        enqueue of the same firing returns the stored occurrence with ``deduplicated=True`` and
        writes nothing — unless its ``payload`` differs, which raises
        ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH``. The payload defaults to the job's; authority
        and max_attempts are snapshotted from the job, and so are its queue and priority unless
        given; ``partition`` defaults to none. Missing job → ``SCHEDULER_NOT_FOUND``; disabled
        job → ``SCHEDULER_JOB_DISABLED``. Appends ``occurrence_enqueued``.
        """
        ...

    def enqueue_occurrence_once_per_trigger(
        self,
        *,
        job_id: str,
        scheduled_for: int,
        trigger_key: str,
        available_at: int | None = None,
        payload: Any = UNSET,
        queue: str | None = None,
        priority: int | None = None,
        partition: str | None = None,
    ) -> Occurrence:
        """Like :meth:`enqueue_occurrence`, but one occurrence per (job, trigger key) forever.

        If one exists it is returned (``deduplicated=True``) without checking the job, its
        revision or the payload. The key is taken before the occurrence is written, so however
        many processes enqueue it at the same instant, one occurrence results (the others wait
        for it, or find it, and return it).
        """
        ...

    def enqueue_batch(self, requests: Sequence[EnqueueRequest]) -> list[Occurrence]:
        """Enqueue up to 10,000 firings in one transaction, each as the single call would
        (``once_per_trigger`` picks that rule), with the same events; results in input order.

        Every request is validated before anything is written (a bad one raises
        ``SCHEDULER_INVALID_ARGUMENT`` with ``details["index"]``). A request that fails in the
        transaction (missing or disabled job, payload mismatch) fails the whole batch, which
        writes nothing; its error's ``details["index"]`` names it.
        """
        ...

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        """The occurrence, or ``None``."""
        ...

    def resolve_occurrence_id(self, prefix: str) -> str:
        """The full id of the one occurrence whose id starts with ``prefix`` (as ``git`` takes
        a unique start of a commit hash).

        ``prefix`` is ``occ_`` and at least 8 of the id's hex digits, or the hex digits alone
        (``occ_`` may be left out; case and surrounding spaces are ignored); a whole id is its
        own prefix. Anything else raises ``SCHEDULER_INVALID_ARGUMENT``. No such occurrence:
        ``SCHEDULER_NOT_FOUND``. More than one: ``SCHEDULER_AMBIGUOUS_ID`` (an
        ``InvalidArgument``) whose message names a few candidates, shortened so each differs,
        and whose ``details`` hold ``prefix`` and ``candidates`` (up to 5 full ids, in id
        order). One read: a range scan of the occurrence id index, however many there are.
        """
        ...

    def list_occurrences(
        self,
        *,
        status: str | None = None,
        job_id: str | None = None,
        kind: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        """Occurrences newest first (by creation), filtered by status, job and/or kind, ``limit``
        (1..1000) per page; pass the page's ``next_cursor`` back as ``cursor`` for the next."""
        ...

    def count_occurrences(self, *, job_id: str | None = None) -> list[OccurrenceCount]:
        """How many occurrences there are per (kind, status), optionally of one job."""
        ...

    def list_occurrences_by_trigger(
        self, *, job_id: str, trigger_key: str, limit: int = 2
    ) -> list[Occurrence]:
        """Occurrences of a job with this trigger key, oldest first (limit clamped to 1..200)."""
        ...

    def claim_next(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
        queues: Collection[str] | None = None,
    ) -> Occurrence | None:
        """Lease the next claimable occurrence to ``owner_id`` for ``lease_ms``.

        First dead-letters running occurrences whose final attempt's lease expired (error code
        ``lease_expired``) and those whose lost lease must be adjudicated (error code
        ``SCHEDULER_OUTCOME_UNKNOWN``). Claimable: the job is enabled, ``attempt <
        max_attempts``, and either queued/retry_wait with ``available_at <= now`` (admitted to
        its partition) or running with ``lease_expires_at <= now`` (a reclaim); its queue is not
        paused and its limits allow it (SPEC §7). Order: larger priority first, then due
        instant (lease expiry for a reclaim), ``scheduled_for``, seq. Filters: the job's kind
        (``job_kind``, or any of ``kinds`` — not both), ``queues``, and the job authority's
        ``workspaceId``. The cost does not grow with rows of other kinds or queues, of disabled
        jobs, of a paused queue, of a partition at its limit, of lower priority, of future work
        or of settled history. Returns ``None`` when
        nothing is claimable. Appends ``occurrence_claimed`` or ``occurrence_reclaimed`` (data
        ``{attempt, previousOwner, previousStatus}``). The returned occurrence carries ``job``
        as read in the same transaction.
        """
        ...

    def claim_batch(
        self,
        *,
        owner_id: str,
        lease_ms: int,
        limit: int,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        kinds: Collection[str] | None = None,
        queues: Collection[str] | None = None,
        limited: int | None = None,
    ) -> list[Occurrence]:
        """Lease up to ``limit`` (1..1000) claimable occurrences in one transaction; at most
        ``limited`` of them from queues with any limit (a worker's free slots: it claims ahead
        only from queues without limits).

        The same as ``limit`` :meth:`claim_next` calls at one instant — same dead-lettering,
        same order, one claim event each — but with one commit, so a worker with several idle
        slots pays for one transaction instead of one per slot. Returns fewer (or none) when
        fewer are claimable. Every lease expires at the same instant: claim only what you are
        about to start.
        """
        ...

    def claim_occurrence(
        self, *, occurrence_id: str, owner_id: str, lease_ms: int
    ) -> Occurrence | None:
        """Targeted claim of one occurrence, same rules as :meth:`claim_next`.

        Missing → ``SCHEDULER_NOT_FOUND``; not claimable now (not due, live lease, terminal,
        blocked, job disabled, attempts exhausted, queue paused or at a limit, partition at its
        limit) → ``None``. Event data adds ``targeted: true``.
        """
        ...

    def renew(self, *, occurrence_id: str, owner_id: str, fence: int, lease_ms: int) -> Occurrence:
        """Extend a live lease to ``max(current expiry, now + lease_ms)`` (never shortens).

        Appends ``occurrence_renewed`` with ``{leaseExpiresAt}``; a lost lease raises
        ``SCHEDULER_LEASE_LOST``.
        """
        ...

    def renew_batch(self, renewals: Sequence[Renewal]) -> list[Occurrence | LeaseLost]:
        """Renew several leases in one transaction, each as :meth:`renew` would.

        Validated whole first (``details["index"]``; an occurrence at most once). A lost lease
        comes back as a :class:`~jobledger.LeaseLost` in its place and changes nothing.
        """
        ...

    def settle(
        self,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        outcome: Outcome,
        result: Any = None,
        error: Any = None,
        retryable: bool = True,
        retry_at: int | None = None,
    ) -> Occurrence:
        """Finish the current attempt under its lease.

        ``succeeded`` stores ``result``. ``failed`` stores ``error`` (default
        ``{code: "execution_failed", message: "Execution failed"}``) and goes to
        ``retry_wait`` (available at ``max(now, retry_at)``) when ``retryable`` and attempts
        remain, else to ``dead_letter``. Appends ``occurrence_succeeded``,
        ``occurrence_retry_scheduled`` (with ``retryAt``) or ``occurrence_dead_lettered``.
        """
        ...

    def settle_batch(self, settlements: Sequence[Settlement]) -> list[Occurrence | LeaseLost]:
        """Settle several attempts in one transaction, each as :meth:`settle` would.

        Every item is validated before anything is read (a bad one raises
        ``SCHEDULER_INVALID_ARGUMENT`` with ``details["index"]`` and changes nothing; so does
        an occurrence named twice). Each item is fenced on its own: one whose lease is lost is
        returned as a :class:`~jobledger.LeaseLost` in its place, changes nothing, and does
        not stop the others. Results are in input order; one commit covers them all.
        """
        ...

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        """Give a live lease back unfinished, e.g. when a worker shuts down gracefully.

        The occurrence returns to ``retry_wait``, claimable now, and the attempt it used is
        handed back (``attempt - 1``) because the work was interrupted, not failed. The fence is
        kept, so the next claim fences the releasing owner out. A lost lease raises
        ``SCHEDULER_LEASE_LOST``. Appends ``occurrence_released`` with ``{attempt, reason}``
        (``reason`` an identifier ≤128 characters, e.g. ``worker_shutdown``).
        """
        ...

    def requeue_dead_letter(
        self, *, occurrence_id: str, expected_fence: int, reason: str, actor: str
    ) -> Occurrence:
        """Operator action: give a dead letter exactly one more attempt.

        The occurrence must be ``dead_letter`` at ``expected_fence`` (else
        ``SCHEDULER_REQUEUE_EVIDENCE_CONFLICT``; missing → ``SCHEDULER_NOT_FOUND``). It becomes
        ``retry_wait``, available now, with ``max_attempts = attempt + 1``; attempt, fence and
        the last error are kept. An occurrence already at 32 attempts raises
        ``SCHEDULER_REQUEUE_ATTEMPT_LIMIT``. Records the requeue (who, why, when) and appends
        ``occurrence_requeued``. Requires schema v2.
        """
        ...

    def cancel_occurrence(self, *, occurrence_id: str, actor: str, reason: str) -> Occurrence:
        """Operator action: cancel a queued, waiting or running occurrence for good.

        It becomes ``cancelled`` (terminal) with ``last_error`` ``{code: "cancelled", message:
        reason, actor}``; a running attempt's lease ends, so its next renewal or settle is
        refused and its handler is cancelled. Appends ``occurrence_cancelled`` with ``{actor,
        reason, attempt, previousStatus, previousOwner}``. A settled occurrence raises
        ``SCHEDULER_CANCEL_CONFLICT`` (``details.status``); missing → ``SCHEDULER_NOT_FOUND``.
        """
        ...

    def hold_owner_lock(self, owner_id: str) -> OwnerLockHandle:
        """Take a lock that the system releases when this owner dies: an ``flock`` on a file
        beside a SQLite database, a session advisory lock on PostgreSQL (on a connection of its
        own). Workers hold one for their lifetime, so others can tell they are gone."""
        ...

    def owner_gone(self, owner_id: str) -> bool:
        """True only when ``owner_id`` held its owner lock and nobody holds it now — its process
        (or database session) is certainly gone. False when unsure (it never took one).

        On PostgreSQL a session can end while its process lives (a terminated backend, a server
        restart or failover); its worker takes the lock again within ``LIVENESS_REFRESH``. So
        the lock must be seen free at two calls ``LIVENESS_CONFIRM`` apart (store clock) before
        the owner counts as gone: a live worker is never reaped for a restart."""
        ...

    def expire_leases_of(self, owner_id: str, *, reason: str) -> list[Occurrence]:
        """End every live lease of ``owner_id`` now, because that owner is known to be gone.

        The next claim takes each over (or dead-letters it, on its final attempt), as after a
        natural expiry. Appends ``occurrence_lease_expired`` with ``{reason}`` per lease.
        """
        ...

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
        follow the log)."""
        ...

    def list_dead_letters(self, *, job_id: str | None = None, limit: int = 50) -> list[Occurrence]:
        """Dead letters, most recently settled first (limit clamped to 200)."""
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
        batch_size: int = 500,
        max_batches: int | None = None,
    ) -> PruneReport:
        """Delete settled occurrences settled before ``before`` with their events and requeue
        records, ``batch_size`` per transaction, each batch audited (``action="pruned"``) in its
        own transaction. Live occurrences are never touched."""
        ...

    def audit_log(self, *, before_id: int | None = None, limit: int = 50) -> list[AuditRecord]:
        """Operator records whose subject may be gone (removed jobs, prunes), newest first."""
        ...

    def verify(self) -> VerifyReport:
        """Check the whole database now — the O(size) checks an open skips: SQLite's
        ``integrity_check`` and foreign keys, the schema catalog, and that every stored
        authority is a valid envelope. Reads only; ``report.ok`` is True when all passed."""
        ...

    # -- queues (SPEC §7) ---------------------------------------------------------------------

    def get_queue(self, name: str) -> Queue | None:
        """A queue's declaration and pause state, or ``None`` when nobody declared it."""
        ...

    def list_queues(self) -> list[Queue]:
        """Every declared (or paused) queue, by name."""
        ...

    def declare_queue(self, declaration: Queue, *, actor: str) -> Queue:
        """Declare a queue's limits, replacing the previous declaration whole (omitted limits
        become ``None``); the same declaration again changes nothing. The pause state is not
        part of it. Appends a ``queue_updated`` audit record with ``actor``."""
        ...

    def pause_queue(self, name: str, *, reason: str, actor: str) -> Queue:
        """Pause a queue (declaring it if nobody did): no claim takes from it once this
        returns; running work finishes. Appends ``queue_paused`` with actor and reason."""
        ...

    def resume_queue(self, name: str, *, actor: str) -> Queue:
        """Resume a paused queue (appends ``queue_resumed``); a queue not paused is returned as
        it is."""
        ...

    def schema_info(self) -> SchemaInfo:
        """Application id, schema version and the newest applied migration."""
        ...

    def close(self) -> None:
        """Release the connection(s). Idempotent."""
        ...

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...

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

    def schedule_state(self, job_id: str) -> ScheduleState | None:
        """The job's planning state and the job, or ``None`` when the job has no schedule row
        (missing, or its trigger is not a jobledger schedule)."""
        ...
