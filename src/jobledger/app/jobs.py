"""Declaring jobs and reading them back (the App's job methods)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import contract
from ..errors import NotFound
from ..models import Event, Job, Occurrence
from ..planning.ensure import ensure_job

if TYPE_CHECKING:
    pass


from .base import AppBase

__all__ = ["JobMethods"]


class JobMethods(AppBase):
    """Declaring jobs and reading them back (the App's job methods)."""

    def create_job(
        self,
        id: str,
        kind: str,
        *,
        payload: Any = None,
        authority: dict[str, Any] | None = None,
        trigger: Any = None,
        max_attempts: int = contract.DEFAULT_MAX_ATTEMPTS,
        enabled: bool = True,
        queue: str = contract.DEFAULT_QUEUE,
        priority: int = 0,
        on_lost_lease: str | None = None,
    ) -> Job:
        """Create a job (revision 1); ``authority`` defaults to :meth:`default_authority`.

        ``queue``/``priority`` are what its occurrences run in and with, unless an enqueue says
        otherwise (SPEC §7); ``on_lost_lease`` ``None`` takes this app's handler's policy for
        the kind (:meth:`handler`), else ``"retry"``."""
        return self.store.create_job(
            id=id,
            kind=kind,
            authority=self.default_authority() if authority is None else authority,
            trigger=trigger,
            payload=payload,
            enabled=enabled,
            max_attempts=max_attempts,
            queue=queue,
            priority=priority,
            on_lost_lease=self.lost_lease_policy(kind, on_lost_lease),
        )

    def ensure_job(
        self,
        id: str,
        kind: str,
        *,
        payload: Any = None,
        authority: dict[str, Any] | None = None,
        trigger: Any = None,
        max_attempts: int = contract.DEFAULT_MAX_ATTEMPTS,
        enabled: bool = True,
        queue: str = contract.DEFAULT_QUEUE,
        priority: int = 0,
        on_lost_lease: str | None = None,
    ) -> Job:
        """Create the job, or bring it to exactly this definition; idempotent.

        For declaring jobs at start-up: the same declaration again changes nothing (no new
        revision); a changed one updates the job with compare-and-swap on its revision. Live
        occurrences keep running unless its ``kind`` or ``authority`` changed (then they are
        stale); a new ``max_attempts`` applies from their next attempt (SPEC §14,
        ``docs/deploys.md``).
        """
        wanted = {
            "kind": kind,
            "trigger": {} if trigger is None else trigger,
            "payload": payload,
            "authority": self.default_authority() if authority is None else authority,
            "enabled": enabled,
            "max_attempts": max_attempts,
            "queue": queue,
            "priority": priority,
            "on_lost_lease": self.lost_lease_policy(kind, on_lost_lease),
        }
        return ensure_job(self.store, id, wanted)

    def get_job(self, job_id: str) -> Job | None:
        return self.store.get_job(job_id)

    def get_occurrence(self, occurrence_id: str) -> Occurrence | None:
        return self.store.get_occurrence(occurrence_id)

    def history(
        self, *, occurrence_id: str | None = None, job_id: str | None = None, limit: int = 50
    ) -> list[Event]:
        """Audit events, newest first."""
        return self.store.history(occurrence_id=occurrence_id, job_id=job_id, limit=limit)

    def cancel(self, occurrence_id: str, *, reason: str, actor: str | None = None) -> Occurrence:
        """Cancel a queued, waiting or running occurrence (audited; see
        :meth:`Store.cancel_occurrence <jobledger.Store.cancel_occurrence>`)."""
        return self.store.cancel_occurrence(
            occurrence_id=occurrence_id, actor=actor or f"app:{self.name}", reason=reason
        )

    def requeue(
        self,
        occurrence_id: str,
        *,
        reason: str,
        actor: str | None = None,
        expected_fence: int | None = None,
        revive_children: bool = False,
        override_adjudication: bool = False,
    ) -> Occurrence:
        """Give a dead letter exactly one more attempt (audited; see
        :meth:`Store.requeue_dead_letter <jobledger.Store.requeue_dead_letter>`).

        ``expected_fence`` is the fence the caller saw (default: the fence as read now).
        ``revive_children``: its descendants cancelled because of it go back to ``blocked``
        and follow its new run (SPEC §14). An outcome-unknown dead letter is refused with
        ``SCHEDULER_REQUEUE_NEEDS_ADJUDICATION`` (use :meth:`adjudicate`) unless
        ``override_adjudication``. A dead letter its job's kind or authority made stale runs as
        the job is now."""
        fence = expected_fence
        if fence is None:
            current = self.store.get_occurrence(occurrence_id)
            if current is None:
                raise NotFound(f"Scheduler occurrence does not exist: {occurrence_id}")
            fence = current.fence
        return self.store.requeue_dead_letter(
            occurrence_id=occurrence_id,
            expected_fence=fence,
            reason=reason,
            actor=actor or f"app:{self.name}",
            revive_children=revive_children,
            override_adjudication=override_adjudication,
        )
