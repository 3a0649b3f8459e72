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

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from ..errors import LeaseLost
from ..models import Event, Job, Occurrence, SchemaInfo, Settlement

if TYPE_CHECKING:
    from .tx import WorkSignal

__all__ = ["UNSET", "Outcome", "Store", "Unset"]

Outcome = Literal["succeeded", "failed"]


class Unset:
    """Marker for "argument not given" where ``None`` is a meaningful JSON value."""

    _instance: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = Unset()


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
        max_attempts: int = 3,
    ) -> Job:
        """Create a job at revision 1 and append ``job_created`` (data ``{revision: 1}``).

        ``trigger`` defaults to ``{}`` and ``payload`` to ``null``. ``authority`` is normalized
        as an authority envelope. An existing id raises ``SCHEDULER_CONFLICT``.
        """
        ...

    def get_job(self, job_id: str) -> Job | None:
        """The job, or ``None``."""
        ...

    def update_job(self, job_id: str, *, expected_revision: int, patch: Mapping[str, Any]) -> Job:
        """Compare-and-swap update: apply ``patch`` only if the job is at ``expected_revision``.

        Patch keys: ``kind, trigger, payload, authority, enabled, max_attempts`` (non-empty).
        Always bumps the revision by one, so occurrences enqueued earlier become stale for the
        runtime. Missing job → ``SCHEDULER_NOT_FOUND``; another revision →
        ``SCHEDULER_REVISION_CONFLICT`` with ``{expectedRevision, actualRevision}``. Appends
        ``job_updated`` with ``{fromRevision, toRevision, changedFields}``.
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
    ) -> Occurrence:
        """Record one firing of a job; idempotent on (job, job revision, scheduled_for, key).

        The occurrence id is derived (:func:`jobledger.derive_occurrence_identity`). A second
        enqueue of the same firing returns the stored occurrence with ``deduplicated=True`` and
        writes nothing — unless its ``payload`` differs, which raises
        ``SCHEDULER_IDEMPOTENCY_PAYLOAD_MISMATCH``. The payload defaults to the job's; authority
        and max_attempts are snapshotted from the job. Missing job → ``SCHEDULER_NOT_FOUND``;
        disabled job → ``SCHEDULER_JOB_DISABLED``. Appends ``occurrence_enqueued``.
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
    ) -> Occurrence:
        """Like :meth:`enqueue_occurrence`, but one occurrence per (job, trigger key) forever.

        If one exists it is returned (``deduplicated=True``) without checking the job, its
        revision or the payload; two or more raise ``SCHEDULER_DATA_CORRUPT``.
        """
        ...

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        """The occurrence, or ``None``."""
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
    ) -> Occurrence | None:
        """Lease the most overdue claimable occurrence to ``owner_id`` for ``lease_ms``.

        First dead-letters (up to 100) running occurrences whose final attempt's lease expired
        (error code ``lease_expired``). Claimable: the job is enabled, ``attempt <
        max_attempts``, and either queued/retry_wait with ``available_at <= now`` or running
        with ``lease_expires_at <= now`` (a reclaim). Order: due instant (lease expiry for a
        reclaim), then ``scheduled_for``, then id. Filters: the job's ``kind`` and the job
        authority's ``workspaceId``. Returns ``None`` when nothing is claimable. Appends
        ``occurrence_claimed`` or ``occurrence_reclaimed`` (data ``{attempt, previousOwner,
        previousStatus}``).
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
    ) -> list[Occurrence]:
        """Lease up to ``limit`` (1..1000) claimable occurrences in one transaction.

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
        job disabled, attempts exhausted) → ``None``. Event data adds ``targeted: true``.
        """
        ...

    def renew(self, *, occurrence_id: str, owner_id: str, fence: int, lease_ms: int) -> Occurrence:
        """Extend a live lease to ``max(current expiry, now + lease_ms)`` (never shortens).

        Appends ``occurrence_renewed`` with ``{leaseExpiresAt}``; a lost lease raises
        ``SCHEDULER_LEASE_LOST``.
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

    def list_dead_letters(self, *, job_id: str | None = None, limit: int = 50) -> list[Occurrence]:
        """Dead letters, most recently settled first (limit clamped to 200)."""
        ...

    def schema_info(self) -> SchemaInfo:
        """Application id, schema version and the newest applied migration."""
        ...

    def close(self) -> None:
        """Release the connection(s). Idempotent."""
        ...

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...
