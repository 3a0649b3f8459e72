"""The worker: N concurrent executions of a :class:`~jobledger.Runtime`, polling and shutting
down gracefully.

* **Concurrency** — ``concurrency`` slot threads each run one occurrence at a time. Slots
  looking for work at the same moment share one ``claim_batch`` transaction, and settles that
  coincide share one ``settle_batch`` transaction (:mod:`jobledger.batching`).
  Sync handlers run on their slot's thread; ``async def`` handlers run on the runtime's one
  event-loop thread while their slot waits, so they interleave with each other on that loop.
* **Polling** — an idle slot waits ``poll_interval`` (± ``poll_jitter``, so many workers do not
  poll in lockstep) on the store's :class:`~jobledger.store.tx.WorkSignal`; an enqueue in
  the same process (or a PostgreSQL ``NOTIFY``) wakes it at once.
* **Shutdown** — :meth:`Worker.stop` (or SIGTERM/SIGINT while :meth:`Worker.run` runs in the
  main thread) stops claiming; in-flight work gets ``grace_period`` to finish and settle; then
  the rest is abandoned: handlers are cancelled and their leases released
  (``reason="worker_shutdown"``), so another worker can claim them at once with the attempt
  handed back. A second signal skips the rest of the grace period.
* **Tests** — :meth:`Worker.run_once` claims and runs up to ``limit`` occurrences in the calling
  thread; no threads, no sleeping.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import Any

from .attempt import SHUTDOWN_REASON
from .batching import ClaimFeed
from .contract import is_safe_int
from .errors import InvalidArgument, SchedulerError
from .models import Occurrence
from .retry import duration_ms
from .runtime import RunResult, Runtime

__all__ = ["Worker", "WorkerSummary"]

logger = logging.getLogger("jobledger.worker")

_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

DEFAULT_POLL_INTERVAL = timedelta(seconds=1)
DEFAULT_GRACE_PERIOD = timedelta(seconds=30)
# How long to wait for abandoned handlers to notice cancellation before returning anyway; their
# leases are already released, so a handler that ignores cancellation can no longer settle.
ABANDON_WAIT_S = 2.0


@dataclass(slots=True)
class WorkerSummary:
    """What :meth:`Worker.run` did: settled statuses counted, and the leases it gave back."""

    statuses: Counter[str] = field(default_factory=Counter)
    released: list[Occurrence] = field(default_factory=list)
    forced: bool = False


class Worker:
    """Runs occurrences with ``runtime`` on ``concurrency`` threads until stopped."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 1,
        poll_interval: int | timedelta = DEFAULT_POLL_INTERVAL,
        poll_jitter: float = 0.1,
        grace_period: int | timedelta = DEFAULT_GRACE_PERIOD,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(runtime, Runtime):
            raise InvalidArgument("runtime must be a jobledger.Runtime")
        if not is_safe_int(concurrency) or not 1 <= concurrency <= 1024:
            raise InvalidArgument("concurrency must be an integer between 1 and 1024")
        if type(poll_jitter) not in (int, float) or not 0 <= poll_jitter < 1:
            raise InvalidArgument("poll_jitter must be a number in [0, 1)")
        self.runtime = runtime
        self.concurrency = concurrency
        self.poll_interval_ms = duration_ms(poll_interval, "poll_interval")
        if self.poll_interval_ms < 1:
            raise InvalidArgument("poll_interval must be at least 1 ms")
        self.poll_jitter = float(poll_jitter)
        self.grace_period_ms = duration_ms(grace_period, "grace_period")
        self.job_kind = job_kind
        self.workspace_id = workspace_id
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._force = threading.Event()
        self._running = threading.Event()
        self._lock = threading.Lock()
        self._summary = WorkerSummary()

    # -- single steps (tests) ----------------------------------------------------------------

    def run_once(self, limit: int = 1) -> list[RunResult]:
        """Claim and run up to ``limit`` occurrences in this thread; stop early when idle.

        Returns the results of the occurrences that were run (``idle`` is not included).
        """
        if not is_safe_int(limit) or limit < 1:
            raise InvalidArgument("limit must be a positive integer")
        results: list[RunResult] = []
        for _ in range(limit):
            result = self.runtime.run_next(job_kind=self.job_kind, workspace_id=self.workspace_id)
            if result.status == "idle":
                break
            self._record(result)
            results.append(result)
        return results

    step = run_once

    # -- the loop ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._running.is_set()

    def wait_until_running(self, timeout: float = 5.0) -> bool:
        """Block until :meth:`run` has started its slots (for code that runs it in a thread)."""
        return self._running.wait(timeout)

    def stop(self) -> None:
        """Ask :meth:`run` to stop gracefully; a second call skips the rest of the grace period.

        Safe to call from any thread and from a signal handler (it only sets events). A stop
        requested before :meth:`run` starts makes that run return at once.
        """
        stop, force = self._stop, self._force
        if stop.is_set():
            force.set()
        stop.set()

    def run(self, *, install_signal_handlers: bool = True) -> WorkerSummary:
        """Run until :meth:`stop` (or SIGTERM/SIGINT) and a graceful shutdown; blocking.

        Signal handlers are installed only when called from the main thread, and the previous
        handlers are restored on return. If this thread is interrupted (``KeyboardInterrupt``
        without our handlers, say), in-flight attempts are given back at once and the exception
        propagates.
        """
        # This run's events: its slots keep watching them even if they outlive run(), so a slot
        # whose handler ignored cancellation exits instead of claiming again after we return.
        stop, force = self._stop, self._force
        previous = self._install_signals() if install_signal_handlers else {}
        self._summary = WorkerSummary()
        feed = ClaimFeed(
            lambda limit: self.runtime.claim_batch(
                limit, job_kind=self.job_kind, workspace_id=self.workspace_id
            ),
            max_batch=self.concurrency,
        )
        slots = [
            threading.Thread(
                target=self._slot, args=(stop, feed), name=f"jobledger-worker-{n}", daemon=True
            )
            for n in range(self.concurrency)
        ]
        try:
            for slot in slots:
                slot.start()
            self._running.set()
            while not stop.wait(0.5):
                if not any(slot.is_alive() for slot in slots):
                    break
        except BaseException:
            force.set()
            raise
        finally:
            stop.set()
            try:
                self._shutdown([slot for slot in slots if slot.ident is not None], force)
                self._release_unstarted(feed)
            finally:
                self._running.clear()
                self._stop, self._force = threading.Event(), threading.Event()
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        return self._summary

    def _install_signals(self) -> dict[int, _SignalHandler]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info("received signal %s: stopping gracefully", signum)
            self.stop()

        previous: dict[int, _SignalHandler] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, on_signal)
        return previous

    def _shutdown(self, slots: list[threading.Thread], force: threading.Event) -> None:
        # Wake idle slots blocked on the work signal so they see the stop request now.
        self.runtime.store.work_signal.notify()
        deadline = time.monotonic() + self.grace_period_ms / 1000
        while not force.is_set():
            alive = [slot for slot in slots if slot.is_alive()]
            remaining = deadline - time.monotonic()
            if not alive or remaining <= 0:
                break
            alive[0].join(timeout=min(remaining, 0.1))
        if not any(slot.is_alive() for slot in slots):
            return
        self._summary.forced = True
        # Repeat until the slots exit: a slot may have claimed just before the stop and only
        # register its attempt after the first call, and that lease must be given back too.
        abandon_deadline = time.monotonic() + ABANDON_WAIT_S
        while True:
            released = self.runtime.abandon_all(SHUTDOWN_REASON)
            if released:
                logger.info("gave back %d unfinished lease(s)", len(released))
            with self._lock:
                self._summary.released.extend(released)
            alive = [slot for slot in slots if slot.is_alive()]
            remaining = abandon_deadline - time.monotonic()
            if not alive or remaining <= 0:
                break
            alive[0].join(timeout=min(remaining, 0.05))

    def _release_unstarted(self, feed: ClaimFeed) -> None:
        """Give back claims made for slots that stopped before taking them (a safety net)."""
        for occurrence in feed.drain():
            try:
                released = self.runtime.store.release_lease(
                    occurrence_id=occurrence.id,
                    owner_id=self.runtime.owner_id,
                    fence=occurrence.fence,
                    reason=SHUTDOWN_REASON,
                )
            except SchedulerError:
                logger.exception("giving back the unstarted claim on %s failed", occurrence.id)
                continue
            with self._lock:
                self._summary.released.append(released)

    def _slot(self, stop: threading.Event, feed: ClaimFeed) -> None:
        work_signal = self.runtime.store.work_signal
        try:
            while True:
                # Read the generation before checking ``stop``: a shutdown sets ``stop`` and then
                # notifies, so either we see the stop or the wait below returns at once.
                seen = work_signal.generation
                if stop.is_set():
                    return
                try:
                    claimed = feed.take()
                    if claimed is not None:
                        self._record(self.runtime.run_claimed(claimed))
                except Exception:
                    logger.exception("claiming or running an occurrence failed")
                    stop.wait(self._poll_timeout())
                    continue
                if claimed is None:
                    work_signal.wait(seen, self._poll_timeout())
        except BaseException:
            # SystemExit from a handler ends a thread silently; say why this slot is gone.
            logger.exception("a worker slot stopped unexpectedly")
            raise

    def _poll_timeout(self) -> float:
        spread = self._rng.uniform(1 - self.poll_jitter, 1 + self.poll_jitter)
        return self.poll_interval_ms * spread / 1000

    def _record(self, result: RunResult) -> None:
        with self._lock:
            self._summary.statuses[result.status] += 1

    @property
    def summary(self) -> WorkerSummary:
        """Counts so far (the same object :meth:`run` returns)."""
        return self._summary
