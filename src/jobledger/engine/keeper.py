"""One heartbeat per runtime: every held lease renewed together, in one transaction.

A runtime holds leases on the occurrences it is running, on those it claimed ahead of its free
slots (prefetch), and on those whose settle is waiting to commit. The :class:`LeaseKeeper`
tracks all of them and, on each beat of its heartbeat, renews every one with a single
:meth:`~jobledger.Store.renew_batch` — one write transaction per beat however many leases are
held, and one timer thread per runtime instead of one per attempt. A lease the store refuses
(another owner took it, or it expired) is reported to its holder, which cancels its handler.

The heartbeat runs only while something is tracked (or while a worker holds it open), driven by
a :class:`~jobledger.engine.heartbeat.HeartbeatDriver`: a thread in production, ``ManualHeartbeat``
in tests.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from ..contract import MAX_BATCH_SIZE
from ..errors import LeaseLost, SchedulerError
from ..models import Occurrence, Renewal
from ..store.base import Store
from .heartbeat import Heartbeat, HeartbeatDriver

__all__ = ["LeaseHolder", "LeaseKeeper"]

logger = logging.getLogger("jobledger.runtime")


class LeaseHolder(Protocol):
    """Something holding a lease: an attempt in flight, or a claim waiting for a slot."""

    @property
    def lease(self) -> Occurrence:
        """The occurrence as last claimed or renewed (its id, fence, expiry)."""
        ...

    def lease_renewed(self, occurrence: Occurrence) -> None: ...

    def lease_lost(self, error: LeaseLost) -> None: ...


class LeaseKeeper:
    """Renews the leases of every tracked holder on each heartbeat (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        owner_id: str,
        lease_ms: int,
        interval_ms: int,
        driver: HeartbeatDriver,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._lease_ms = lease_ms
        self._interval_ms = interval_ms
        self._driver = driver
        self._lock = threading.Lock()
        self._holders: dict[int, LeaseHolder] = {}
        self._heartbeat: Heartbeat | None = None
        self._held_open = 0
        self._beating = threading.Lock()  # one renew batch at a time

    def track(self, holder: LeaseHolder) -> None:
        """Keep ``holder``'s lease renewed; raises (tracking nothing) if the heartbeat cannot
        start."""
        with self._lock:
            self._ensure_running()
            self._holders[id(holder)] = holder

    def untrack(self, holder: LeaseHolder) -> None:
        with self._lock:
            self._holders.pop(id(holder), None)
            heartbeat = self._stop_if_idle()
        if heartbeat is not None:
            heartbeat.stop()

    def hold_open(self) -> None:
        """Keep the heartbeat running while nothing is tracked (a worker, for its lifetime)."""
        with self._lock:
            self._held_open += 1
            self._ensure_running()

    def release_hold(self) -> None:
        with self._lock:
            self._held_open = max(0, self._held_open - 1)
            heartbeat = self._stop_if_idle()
        if heartbeat is not None:
            heartbeat.stop()

    def _ensure_running(self) -> None:
        if self._heartbeat is None:
            self._heartbeat = self._driver.start(self._interval_ms, self.beat)

    def _stop_if_idle(self) -> Heartbeat | None:
        if self._holders or self._held_open or self._heartbeat is None:
            return None
        heartbeat, self._heartbeat = self._heartbeat, None
        return heartbeat

    @property
    def tracked(self) -> int:
        with self._lock:
            return len(self._holders)

    def beat(self) -> None:
        """Renew every tracked lease now (in batches of at most 1,000, one transaction each)."""
        with self._beating:
            with self._lock:
                holders = list(self._holders.values())
            for start in range(0, len(holders), MAX_BATCH_SIZE):
                self._renew(holders[start : start + MAX_BATCH_SIZE])

    def _renew(self, holders: list[LeaseHolder]) -> None:
        renewals = [
            Renewal(
                occurrence_id=holder.lease.id,
                owner_id=self._owner_id,
                fence=holder.lease.fence,
                lease_ms=self._lease_ms,
            )
            for holder in holders
        ]
        try:
            outcomes = self._store.renew_batch(renewals)
        except SchedulerError:
            # Storage trouble: the leases run on; the next beat tries again, and a lease that
            # expires meanwhile is reported as lost by the next renewal or the settle.
            logger.warning("renewing %d lease(s) failed", len(renewals), exc_info=True)
            return
        for holder, outcome in zip(holders, outcomes, strict=True):
            try:
                if isinstance(outcome, LeaseLost):
                    self.untrack(holder)
                    holder.lease_lost(outcome)
                else:
                    holder.lease_renewed(outcome)
            except Exception:  # one holder's callback must not stop the others
                logger.exception("a lease callback failed")

    def close(self) -> None:
        with self._lock:
            self._holders.clear()
            self._held_open = 0
            heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            heartbeat.stop()
