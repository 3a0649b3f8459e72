"""Queues: limits and pause (the App's queue methods, SPEC §7)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..models import Queue, Rate
from ..models.queues import normalize_declaration

if TYPE_CHECKING:
    pass


from .base import AppBase

__all__ = ["QueueMethods"]


class QueueMethods(AppBase):
    """Queues: limits and pause (the App's queue methods, SPEC §7)."""

    # -- queues (SPEC §7) --------------------------------------------------------------------

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        worker_concurrency: int | None = None,
        partition_concurrency: int | None = None,
        rate: Rate | None = None,
        partition_rate: Rate | None = None,
        actor: str | None = None,
    ) -> Queue:
        """Declare a queue's limits (idempotent; a changed declaration replaces the whole
        previous one, audited, and omitted limits become ``None``: no limit). A queue nobody
        declared has no limits. Never resumes a paused queue. See ``docs/queues.md``."""
        declaration = normalize_declaration(
            name=name,
            concurrency=concurrency,
            worker_concurrency=worker_concurrency,
            partition_concurrency=partition_concurrency,
            rate=rate,
            partition_rate=partition_rate,
        )
        return self.store.declare_queue(declaration, actor=actor or f"app:{self.name}")

    def pause_queue(self, name: str, *, reason: str, actor: str | None = None) -> Queue:
        """Pause a queue: no claim takes from it once this returns (running work finishes,
        enqueues still work, the pause survives restarts). Audited with ``reason``."""
        return self.store.pause_queue(name, reason=reason, actor=actor or f"app:{self.name}")

    def resume_queue(self, name: str, *, actor: str | None = None) -> Queue:
        """Resume a paused queue (audited)."""
        return self.store.resume_queue(name, actor=actor or f"app:{self.name}")

    def get_queue(self, name: str) -> Queue | None:
        return self.store.get_queue(name)

    def list_queues(self) -> list[Queue]:
        return self.store.list_queues()
