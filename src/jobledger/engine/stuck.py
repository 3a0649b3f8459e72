"""A worker's stuck slots: slots whose handler ran past its time limit and still runs.

A sync handler on a slot's thread that ignores cancellation cannot be stopped (Python cannot
kill a thread): its attempt is settled on time (a retryable ``SCHEDULER_RUNTIME_TIMEOUT``), its
lease is no longer renewed, but the thread runs on and the slot runs nothing until the handler
returns. :class:`StuckSlots` keeps the list (logged once per slot, counted by the observer and
in the worker's registry entry) and says when a worker has been useless long enough to give up:
every slot stuck for ``stuck_grace`` (``WorkerOptions.stuck_grace``), measured on the worker's
monotonic clock from the moment the last of them got stuck. Such a worker exits (non-zero from
``jobledger worker``) so its supervisor starts a fresh process; handlers with
``isolation="process"`` are killed at their limit instead and never make a slot stuck.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..clock import Monotonic
from ..models import Occurrence
from .attempt import Attempt
from .observe import Observer, attempt_fields, notify

__all__ = ["StuckSlots"]

logger = logging.getLogger("jobledger.worker")


class StuckSlots:
    """The stuck slots of one worker with ``concurrency`` slots (thread-safe)."""

    def __init__(
        self,
        *,
        concurrency: int,
        grace_ms: int | None,
        monotonic: Monotonic,
        observer: Observer,
    ) -> None:
        self.concurrency = concurrency
        self.grace_ms = grace_ms
        self._monotonic = monotonic
        self._observer = observer
        self._lock = threading.Lock()
        # By attempt: the slot's thread, the occurrence, when (monotonic s) it got stuck.
        self._stuck: dict[int, tuple[threading.Thread, Occurrence, float]] = {}

    @property
    def occurrences(self) -> list[Occurrence]:
        with self._lock:
            return [occurrence for _, occurrence, _ in self._stuck.values()]

    def stuck(self, attempt: Attempt, slot: threading.Thread) -> None:
        """``attempt`` timed out while its handler still runs on ``slot``."""
        occurrence = attempt.claimed
        with self._lock:
            self._stuck[id(attempt)] = (slot, occurrence, self._monotonic())
            count = len(self._stuck)
        logger.warning(
            "worker slot %s is stuck: the handler of %s ran past its time limit and ignores "
            "cancellation (its attempt is settled; Python cannot stop the thread); the slot "
            "runs nothing until the handler returns (%d of %d slot(s) stuck)",
            slot.name,
            occurrence.id,
            count,
            self.concurrency,
            extra=attempt_fields(occurrence),
        )
        notify(self._observer, "slot_stuck", occurrence)

    def freed(self, attempt: Attempt, slot: threading.Thread) -> None:
        """The stuck handler of ``attempt`` returned at last."""
        occurrence = attempt.claimed
        with self._lock:
            self._stuck.pop(id(attempt), None)
        logger.info(
            "the stuck handler of %s returned: worker slot %s runs attempts again",
            occurrence.id,
            slot.name,
            extra=attempt_fields(occurrence),
        )
        notify(self._observer, "slot_freed", occurrence)

    def status(self) -> dict[str, Any]:
        """What the worker's registry entry shows (``jobledger stats``)."""
        with self._lock:
            stuck = sorted(occurrence.id for _, occurrence, _ in self._stuck.values())
        return {"stuckSlots": len(stuck), "stuckOccurrences": stuck}

    def working(self, slots: list[threading.Thread]) -> list[threading.Thread]:
        """The slots still running an attempt: alive and not stuck (a stuck slot's attempt is
        settled, so a shutdown has nothing to wait for or give back there)."""
        with self._lock:
            stuck = [thread for thread, _, _ in self._stuck.values()]
        return [slot for slot in slots if slot.is_alive() and all(slot is not t for t in stuck)]

    def past_grace(self) -> bool:
        """Every slot has been stuck for at least the grace (never, without a grace)."""
        if self.grace_ms is None:
            return False
        with self._lock:
            if len(self._stuck) < self.concurrency:
                return False
            last = max(since for _, _, since in self._stuck.values())
        return (self._monotonic() - last) * 1000 >= self.grace_ms
