"""Schedules: declaring them, planning, explaining (the App's schedule methods)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Unpack

from ..models import Job, Occurrence
from ..planning.declare import ScheduleOptions, declare_schedule

if TYPE_CHECKING:
    from ..planning.explain import Explanation
    from ..planning.planner import PlanReport


from .base import AppBase

__all__ = ["ScheduleMethods"]


class ScheduleMethods(AppBase):
    """Schedules: declaring them, planning, explaining (the App's schedule methods)."""

    # -- schedules ---------------------------------------------------------------------------

    def schedule(
        self,
        job_id: str,
        kind: str,
        *,
        authority: dict[str, Any] | None = None,
        **options: Unpack[ScheduleOptions],
    ) -> Job:
        """Declare a scheduled job (``cron``, ``every`` or ``at``: exactly one); idempotent.

        The options are :class:`~jobledger.planning.declare.ScheduleOptions` (``timezone``,
        ``anchor``, ``payload``, ``misfire``, ``misfire_grace``, ``catch_up_limit``, ``jitter``,
        ``overlap``,
        ``nonexistent``, ``ambiguous``, ``max_attempts``, ``enabled``, ``queue``, ``priority``,
        ``on_lost_lease`` — ``None``: this app's handler's policy for the kind), as
        :func:`~jobledger.planning.declare.declare_schedule` takes them; ``authority`` defaults
        to :meth:`default_authority`. The same declaration again changes nothing; a changed one
        updates the job (CAS), and planning restarts from the edit (``docs/schedules.md``).
        """
        options["on_lost_lease"] = self.lost_lease_policy(kind, options.get("on_lost_lease"))
        return declare_schedule(
            self.store,
            job_id,
            kind,
            authority=self.default_authority() if authority is None else authority,
            **options,
        )

    def backfill(
        self,
        job_id: str,
        *,
        start: datetime,
        end: datetime,
        actor: str | None = None,
    ) -> list[Occurrence]:
        """Enqueue every slot of ``job_id``'s schedule in ``[start, end)`` (aware datetimes)
        that has no occurrence yet, under any revision of the job; return those created,
        oldest first. Repeated or concurrent backfills create each slot once; the misfire
        policy does not apply; at most 10,000 slots per call (more:
        ``SCHEDULER_INVALID_ARGUMENT`` naming the cap). Audited as ``schedule_backfilled``
        with ``actor`` (default ``app:<name>``) — ``docs/schedules.md#backfill``."""
        from ..planning.backfill import backfill

        return backfill(self.store, job_id, start=start, end=end, actor=actor or f"app:{self.name}")

    def plan(self) -> PlanReport:
        """One planner pass now (a worker runs them on its own schedule)."""
        from ..planning.planner import Planner

        return Planner(self.store, clock=self.clock).tick()

    def explain(self, job_id: str, *, count: int = 5) -> Explanation:
        """When will ``job_id`` fire next, and why didn't it fire (``docs/schedules.md``)."""
        from ..planning.explain import explain

        return explain(self.store, job_id, count=count)
