"""The storage seam: the :class:`Store` protocol every backend implements.

Two implementations exist: :class:`jobledger.store.sqlite.SQLiteStore` (embedded, the default)
and :class:`jobledger.store.postgres.PostgresStore` (many workers on many machines). Both run the
same conformance suite (``tests/store/``); the contracts in its parts (``store/seams/``) are
what that suite checks.

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

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..models import UNSET, Outcome, SchemaInfo, Unset
from .owner_lock import NoOwnerLock, OwnerLockHandle
from .seams.admin import AuditSeam, JobSeam, QueueSeam, ScheduleSeam
from .seams.flows import FlowSeam
from .seams.outcomes import OutcomeSeam
from .seams.work import OccurrenceSeam

if TYPE_CHECKING:
    from .tx import WorkSignal

__all__ = ["UNSET", "NoOwnerLock", "Outcome", "OwnerLockHandle", "Store", "Unset"]


@runtime_checkable
class Store(
    JobSeam,
    OccurrenceSeam,
    AuditSeam,
    QueueSeam,
    ScheduleSeam,
    FlowSeam,
    OutcomeSeam,
    Protocol,
):
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

    def schema_info(self) -> SchemaInfo:
        """Application id, schema version and the newest applied migration."""
        ...

    def close(self) -> None:
        """Release the connection(s). Idempotent."""
        ...

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc: object) -> None: ...
