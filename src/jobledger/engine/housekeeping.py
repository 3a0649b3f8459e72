"""What a worker does beside running handlers: announce itself, reap the dead, plan, prune.

:class:`Housekeeper` owns a worker's life in the store around its slots:

* **announce / farewell** — the worker's liveness lock (taken *before* it registers, since once
  registered with it other workers may reap its leases the moment the lock is free) and its row
  in ``jobledger_workers`` (who it is, what it runs, when it was last seen);
* **periodic tasks**, each on its own interval of the injected monotonic clock — ``reap`` (end
  the leases of workers that are certainly gone, so their work is taken over at once), ``beat``
  (record this worker alive) and ``prune`` (with ``retention``: remove settled history); a beat
  whose ``status`` (the worker's stuck slots) changed re-registers the worker with it;
* **the liveness lock's session** (PostgreSQL) — :meth:`Housekeeper.keep_liveness`, on a thread
  of its own so a slow reap or beat never delays it: every ``refresh_interval`` it checks the
  session and takes the lock back at once if it ended (others call this worker gone if it stays
  without its lock for ``LIVENESS_CONFIRM``);
* **the planner loop** — :meth:`jobledger.Planner.tick` whenever a slot falls due, at least every
  ``plan_interval``;
* **clock steps** — on every pass the store's clock (:meth:`~jobledger.Store.now`: the process
  clock on SQLite, the database clock on PostgreSQL) must have moved as far as the monotonic
  clock; a disagreement beyond ``CLOCK_STEP_THRESHOLD`` is a step (an operator or NTP setting
  the clock, a VM or laptop resumed from suspend). It is logged with its direction and size and
  reported to the observer (``jobledger_clock_steps_total{direction}``): what a step does to
  leases, due work and schedules is in ``docs/guarantees.md`` ("Clock steps").

:meth:`Housekeeper.run_due` runs whatever is due at one monotonic instant, so tests drive the
tasks without threads or sleeping; :meth:`Housekeeper.run` is the thread's loop around it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..clock import Monotonic
from ..durations import ms_from_timedelta
from ..errors import SchedulerError
from ..planning.planner import Planner
from ..store.base import OwnerLockHandle, Store
from ..version import __version__
from .observe import Observer, notify
from .options import WorkerOptions

__all__ = ["CLOCK_STEP_THRESHOLD", "Housekeeper"]

logger = logging.getLogger("jobledger.worker")

# What a housekeeper reports to its worker's summary: a counter's name and how much to add.
Record = Callable[[str, int], None]
# How far the store's clock may move apart from the monotonic clock between two housekeeping
# passes before it counts as a step: well above a slow store read or a busy machine's scheduling
# delay, well below a lease.
CLOCK_STEP_THRESHOLD = timedelta(seconds=5)


class Housekeeper:
    """A worker's announce/farewell, periodic tasks and planner loop (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        *,
        owner_id: str,
        options: WorkerOptions,
        kinds: frozenset[str],
        observer: Observer,
        monotonic: Monotonic,
        record: Record,
        poll_timeout: Callable[[], float],
        status: Callable[[], dict[str, Any]] = dict,
    ) -> None:
        self._store = store
        self._owner_id = owner_id
        self._options = options
        self._kinds = kinds
        self._observer = observer
        self._monotonic = monotonic
        self._record = record
        self._poll_timeout = poll_timeout
        self._status = status
        self._info: dict[str, Any] = {}
        self._reported_status: dict[str, Any] = {}
        self._gone = False
        # (store clock ms, monotonic s) at the last pass, to tell a step from time passing.
        self._clock_mark: tuple[int, float] | None = None
        self._owner_lock: OwnerLockHandle | None = None
        self._planner = Planner(store)
        self._seconds: dict[str, float] = {}
        self._due: dict[str, float] = {}

    # -- announce and farewell ----------------------------------------------------------------

    def announce(self) -> None:
        """Take the liveness lock, then register this worker (failures are logged: a worker
        without them still runs, it just cannot be reaped at once or listed)."""
        options = self._options
        try:
            self._owner_lock = self._store.hold_owner_lock(self._owner_id)
        except SchedulerError:
            logger.exception("could not take this worker's liveness lock")
            self._owner_lock = None
        self._info = {
            "kinds": sorted(self._kinds),
            "concurrency": options.concurrency,
            "prefetch": options.effective_prefetch,
            "planner": options.planner,
            "liveness": "none" if self._owner_lock is None else self._owner_lock.kind,
            "version": __version__,
        }
        try:
            self._gone = False
            self._register(self._status())
        except SchedulerError:
            logger.exception("could not record this worker in the store")
        self._schedule()

    def _register(self, status: dict[str, Any]) -> None:
        # The registry's upsert keeps started_at: announcing again only refreshes the info.
        self._store.register_worker(
            worker_id=self._owner_id,
            hostname=socket.gethostname() or "localhost",
            pid=os.getpid(),
            info={**self._info, **status},
        )
        self._reported_status = status

    def farewell(self) -> None:
        """Record the stop, then give the liveness lock back."""
        self._gone = True  # a late beat must not announce a stopped worker again
        try:
            self._store.stop_worker(self._owner_id)
        except SchedulerError:
            logger.exception("could not record this worker's stop")
        lock, self._owner_lock = self._owner_lock, None
        if lock is not None:
            lock.close()

    # -- periodic tasks -----------------------------------------------------------------------

    def _schedule(self) -> None:
        options = self._options
        seconds = {
            "reap": ms_from_timedelta(options.reap_interval, "reap_interval") / 1000,
            "beat": ms_from_timedelta(options.heartbeat_interval, "heartbeat_interval") / 1000,
        }
        if options.retention is not None:
            seconds["prune"] = ms_from_timedelta(options.prune_interval, "prune_interval") / 1000
        self._seconds = seconds
        now = self._monotonic()
        self._due = dict.fromkeys(seconds, now)

    def run_due(self, now: float | None = None) -> float:
        """Run every task due at ``now`` (monotonic seconds; default: the clock's reading) and
        return when the next one is due."""
        if not self._due:
            self._schedule()
        self._check_clock()
        now = self._monotonic() if now is None else now
        for task in [name for name, at in self._due.items() if at <= now]:
            self._due[task] = now + self._seconds[task]
            try:
                getattr(self, f"_{task}")()
            except SchedulerError:
                logger.exception("worker housekeeping (%s) failed", task)
        return min(self._due.values())

    def run(self, stop: threading.Event) -> None:
        """The housekeeping thread: run due tasks until ``stop``."""
        while not stop.is_set():
            next_due = self.run_due()
            stop.wait(max(0.01, next_due - self._monotonic()))

    def _check_clock(self) -> None:
        """Compare the store clock's progress since the last pass with the monotonic clock's;
        report a step beyond ``CLOCK_STEP_THRESHOLD``."""
        threshold_s = CLOCK_STEP_THRESHOLD.total_seconds()
        before = self._monotonic()
        try:
            store_now = self._store.now()  # PostgreSQL: a round trip now and then
        except SchedulerError:
            logger.debug("could not read the store's clock", exc_info=True)
            return
        after = self._monotonic()
        if after - before > threshold_s / 2:
            return  # too slow a read to place it in time: compare at the next pass instead
        monotonic_now = (before + after) / 2
        mark, self._clock_mark = self._clock_mark, (store_now, monotonic_now)
        if mark is None:
            return
        store_moved_s = (store_now - mark[0]) / 1000
        elapsed_s = monotonic_now - mark[1]
        step_s = store_moved_s - elapsed_s
        if abs(step_s) <= threshold_s:
            return
        direction = "forward" if step_s > 0 else "backward"
        if direction == "forward":
            effect = (
                "leases held across it may have expired under their holders (on SQLite a live "
                "worker keeps its own; on PostgreSQL the next claim takes them over); "
                "delayed work, retries and schedule slots it skipped are due at once"
            )
        else:
            effect = (
                "work that was due, retries and schedules wait until the clock catches up, "
                "and leases held across it last that much longer"
            )
        logger.warning(
            "the store's clock stepped %s by %.1f s (it moved %.1f s while %.1f s passed): %s",
            direction,
            abs(step_s),
            store_moved_s,
            elapsed_s,
            effect,
            extra={"clock_step_s": round(step_s, 3), "direction": direction},
        )
        notify(self._observer, "clock_stepped", direction, abs(step_s))

    def _reap(self) -> None:
        store, me = self._store, self._owner_id
        for holder in store.lease_holders():
            if holder.owner_id != me and store.owner_gone(holder.owner_id):
                expired = store.expire_leases_of(holder.owner_id, reason="owner_gone")
                if expired:
                    logger.warning(
                        "worker %s is gone: ended its %d lease(s) so others take them over now",
                        holder.owner_id,
                        len(expired),
                    )
                    self._record("reaped", len(expired))
        # A worker that died holding no lease is gone too: record its stop, so it is no longer
        # listed among the running workers (jobledger stats, the dashboard) with a stale state.
        for worker in store.list_workers():
            if worker.worker_id != me and store.owner_gone(worker.worker_id):
                store.stop_worker(worker.worker_id)
                logger.warning("worker %s is gone: recorded its stop", worker.worker_id)

    def _beat(self) -> None:
        status = self._status()
        if self._gone:
            return
        if status != self._reported_status:
            self._register(status)
        else:
            self._store.touch_worker(self._owner_id)

    def keep_liveness(self, stop: threading.Event) -> None:
        """The liveness thread: refresh the owner lock every ``refresh_interval`` until
        ``stop`` (returns at once for a lock that needs none: an ``flock``)."""
        lock = self._owner_lock
        if lock is None or lock.refresh_interval is None:
            return
        seconds = ms_from_timedelta(lock.refresh_interval, "refresh_interval") / 1000
        while not stop.wait(seconds):
            try:
                lock.refresh()
            except SchedulerError:
                logger.exception("worker housekeeping (liveness) failed")

    def _prune(self) -> None:
        retention = self._options.retention
        assert retention is not None
        cutoff = self._store.now() - ms_from_timedelta(retention, "retention")
        report = self._store.prune(before=max(0, cutoff), actor=self._owner_id)
        if report.occurrences:
            logger.info("pruned %d settled occurrence(s)", report.occurrences)

    # -- the planner --------------------------------------------------------------------------

    def plan_once(self) -> float:
        """One planner pass; returns how long to wait (seconds) before the next."""
        longest = ms_from_timedelta(self._options.plan_interval, "plan_interval") / 1000
        try:
            report = self._planner.tick()
        except SchedulerError:
            logger.exception("planning failed; trying again")
            return min(longest, self._poll_timeout())
        self._record("plans", 1)
        if report.enqueued:
            # A pass that plans a schedule's next slot is routine (DEBUG); one that also skipped
            # slots (coalesced after a restart, misfires) is worth a line at INFO.
            level = logging.INFO if report.skipped else logging.DEBUG
            logger.log(level, "planned %d occurrence(s)", len(report.enqueued))
        notify(self._observer, "planned", report.enqueued, len(report.skipped), report.now)
        if report.next_due_at is None:
            return longest
        return min(longest, max(0.0, (report.next_due_at - report.now) / 1000))

    def plan(self, stop: threading.Event) -> None:
        """The planner thread: plan until ``stop``."""
        while not stop.is_set():
            stop.wait(max(self.plan_once(), 0.001))
