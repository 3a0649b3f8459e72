"""The Store protocol's operations on occurrences: enqueue, read, claim, lease, settle (part of
:class:`jobledger.store.base.Store`; the shared rules are in that module's docstring)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from ...errors import LeaseLost
from ...models import (
    UNSET,
    EnqueueRequest,
    Occurrence,
    OccurrenceCount,
    OccurrencePage,
    Outcome,
    Progress,
    Renewal,
    Settlement,
)
from ..owner_lock import OwnerLockHandle

__all__ = ["OccurrenceSeam"]


class OccurrenceSeam(Protocol):
    """Occurrences and their leases."""

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
        trace_context: Mapping[str, str] | None = None,
    ) -> Occurrence:
        """Record one firing of a job; idempotent on (job, job revision, scheduled_for, key).

        The occurrence id is derived (:func:`jobledger.derive_occurrence_identity`). A second
        enqueue of the same firing returns the stored occurrence with ``deduplicated=True`` and
        writes nothing — unless its ``payload`` differs, which raises
        ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH``. The payload defaults to the job's; authority
        and max_attempts are snapshotted from the job, and so are its queue and priority unless
        given; ``partition`` defaults to none. Missing job → ``SCHEDULER_NOT_FOUND``; disabled
        job → ``SCHEDULER_JOB_DISABLED``. Appends ``occurrence_enqueued``. ``trace_context``
        (a W3C trace context, see :class:`~jobledger.EnqueueRequest`) is stored with a new
        occurrence; a deduplicated enqueue keeps the first one's.
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
        writes nothing; its error's ``details["index"]`` names it. A request with ``after``
        waits for those parents (SPEC §10; the rules are in :mod:`.flows`).
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
        queue: str | None = None,
        partition: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> OccurrencePage:
        """Occurrences newest first (insertion order), filtered by status, job, kind, queue,
        partition, idempotency ``key`` (as given to ``App.enqueue(key=…)``, across jobs) and/or
        ``tag`` (one of the tags given at enqueue),
        ``limit`` (1..1000) per page; pass the page's ``next_cursor`` back as ``cursor`` for the
        next. Each page is one range of an index, whatever the store holds. A key, tag,
        partition, job or queue filtered by anything else looks at the next 10,000 occurrences
        of the first of those per page: a page may then hold fewer than ``limit`` and still
        have a ``next_cursor`` (only ``None`` means the end)."""
        ...

    def count_occurrences(
        self, *, job_id: str | None = None, cap: int | None = None
    ) -> list[OccurrenceCount]:
        """How many occurrences there are per (kind, status), optionally of one job.

        ``cap=None`` counts exactly (reading every row's index entry). With ``cap`` (1..10⁶)
        each (kind, status) is counted up to ``cap``, and a count that reached it is ``capped``
        (the true number is at least that): the read costs at most ``cap`` index entries per
        (kind, status), whatever the store holds. A job's capped counts are those of its newest
        ``cap`` occurrences (each ``capped`` when it has at least that many)."""
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
        """Lease the next claimable occurrence to ``owner_id`` for ``lease_ms``, marked started
        (``started_at``: its handler begins at once).

        First gives back the running occurrences whose lease expired before their handler
        began (``started_at`` NULL: claimed ahead, never started) — ``retry_wait``, the attempt
        not spent, ``occurrence_released`` ``{attempt, reason: "lease_expired", started:
        false}`` — then dead-letters the started ones whose final attempt's lease expired (error
        code ``lease_expired``) and those whose lost lease must be adjudicated (error code
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
        start: int | None = None,
    ) -> list[Occurrence]:
        """Lease up to ``limit`` (1..1000) claimable occurrences in one transaction; at most
        ``limited`` of them from queues with any limit (a worker's free slots: it claims ahead
        only from queues without limits). The first ``start`` of them (in claim order; ``None``:
        all) are marked started — their handlers begin at once; the others are claims held
        ahead, which :meth:`start_batch` (or ``settle_batch(..., starts=…)``) marks before their
        handlers begin, and which a crash gives back instead of spending.

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

    def record_progress(
        self,
        *,
        occurrence_id: str,
        owner_id: str,
        fence: int,
        done: int | float,
        total: int | float | None = None,
        message: str | None = None,
    ) -> Progress:
        """Record how far the running attempt got (``ctx.progress``): ``done`` of ``total``
        (a finite number >= 0, and one > 0 or ``None``) and a ``message`` of at most 500
        characters, stored with the occurrence (``Occurrence.progress``) with its attempt and
        the instant. Fenced as :meth:`renew`: only the holder of the current, unexpired lease
        writes it, else :class:`~jobledger.LeaseLost` and nothing changes. Appends no event and
        leaves the lease and the row's instants as they are."""
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

    def settle_batch(
        self, settlements: Sequence[Settlement], *, starts: Sequence[Renewal] = ()
    ) -> list[Occurrence | LeaseLost]:
        """Settle several attempts in one transaction, each as :meth:`settle` would — and mark
        the ``starts`` started in the same transaction (as :meth:`start_batch`; a worker's slot
        marks its next buffered claim with the settle that frees it).

        Every item is validated before anything is read (a bad one raises
        ``SCHEDULER_INVALID_ARGUMENT`` with ``details["index"]`` and changes nothing; so does
        an occurrence named twice). Each item is fenced on its own: one whose lease is lost is
        returned as a :class:`~jobledger.LeaseLost` in its place, changes nothing, and does
        not stop the others. Results are in input order, the settlements' then the starts';
        one commit covers them all.
        """
        ...

    def start_batch(self, starts: Sequence[Renewal]) -> list[Occurrence | LeaseLost]:
        """Mark attempts started — their handlers are about to begin — in one transaction.

        A claim held ahead (``started_at`` NULL) must be marked before its handler runs: a
        crash gives a never-started claim back (its attempt not spent, never a dead letter or
        an outcome-unknown case) and counts a started one as lost. Each mark is fenced and
        renews the lease as :meth:`renew_batch` does (the attempt's lease check before its
        handler); the first mark stands. A lost lease comes back as a
        :class:`~jobledger.LeaseLost` in its place. Appends ``occurrence_started``
        ``{attempt, leaseExpiresAt}``.
        """
        ...

    def release_lease(
        self, *, occurrence_id: str, owner_id: str, fence: int, reason: str
    ) -> Occurrence:
        """Give a live lease back unfinished, e.g. when a worker shuts down gracefully.

        The occurrence returns to ``retry_wait``, claimable now, and the attempt it used is
        handed back (``attempt - 1``, ``started_at`` cleared) because the work was interrupted,
        not failed. The fence is
        kept, so the next claim fences the releasing owner out. A lost lease raises
        ``SCHEDULER_LEASE_LOST``. Appends ``occurrence_released`` with ``{attempt, reason}``
        (``reason`` an identifier ≤128 characters, e.g. ``worker_shutdown``).
        """
        ...

    def requeue_dead_letter(
        self,
        *,
        occurrence_id: str,
        expected_fence: int,
        reason: str,
        actor: str,
        revive_children: bool = False,
        override_adjudication: bool = False,
    ) -> Occurrence:
        """Operator action: give a dead letter exactly one more attempt.

        The occurrence must be ``dead_letter`` at ``expected_fence`` (else
        ``SCHEDULER_REQUEUE_EVIDENCE_CONFLICT``; missing → ``SCHEDULER_NOT_FOUND``). It becomes
        ``retry_wait``, available now, with ``max_attempts = attempt + 1``; attempt, fence and
        the last error are kept. An occurrence already at 32 attempts raises
        ``SCHEDULER_REQUEUE_ATTEMPT_LIMIT``. Records the requeue (who, why, when) and appends
        ``occurrence_requeued``. Requires schema v2.

        A dead letter whose job changed its kind or authority since it was enqueued (stale,
        SPEC §14) is bound to the job's current revision; the event carries
        ``previousJobRevision`` and ``jobRevision``. An outcome-unknown dead letter with no
        adjudication recorded is refused with ``SCHEDULER_REQUEUE_NEEDS_ADJUDICATION`` (decide
        it with :meth:`adjudicate`) unless ``override_adjudication`` (recorded in the event and
        the audit log). ``revive_children``: its descendants cancelled because of it
        (``parent_failed``) are ``blocked`` again and follow its new run (SPEC §14, see
        ``store/operations/revive.py``); the event's ``revived`` lists them.
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

        On PostgreSQL a session can end while its process lives (a terminated backend, a flapping
        network, a server restart or failover); its worker takes the lock again within
        ``LIVENESS_REFRESH``, bumping its generation. So the lock must be seen free at two calls
        ``LIVENESS_CONFIRM`` apart (store clock) with the same generation — not taken in
        between — before the owner counts as gone: a live worker is not reaped for a restart
        or for sessions cut again and again."""
        ...

    def expire_leases_of(self, owner_id: str, *, reason: str) -> list[Occurrence]:
        """End every live lease of ``owner_id`` now, because that owner is known to be gone.

        A claim whose handler never began is given back at once (``retry_wait``, its attempt
        not spent; ``occurrence_released`` ``{attempt, reason, started: false}``). The next
        claim takes each started one over (or dead-letters it, on its final attempt or as an
        outcome-unknown one), as after a natural expiry: ``occurrence_lease_expired`` with
        ``{reason}`` per lease. Returns those given back, then those ended.
        """
        ...
