"""The worker: slots running a :class:`~jobledger.Runtime`'s attempts, fed by batched claims,
settling by group commit, planning schedules, shutting down gracefully.

* **Slots** — ``concurrency`` threads each run one attempt at a time. Sync handlers run on their
  slot's thread; ``async def`` handlers run on the runtime's event loop while the slot waits.
* **Claims** — a feeder keeps ``concurrency + prefetch`` occurrences claimed, refilling in one
  ``claim_batch`` transaction whatever the slots consumed
  (:class:`~jobledger.engine.batching.ClaimAhead`).
  It claims only the kinds this worker has handlers for (or ``kinds``), so during a rolling deploy
  an occurrence of a new kind waits for a worker that knows it.
* **Settles** — a slot hands its settlement to the settler and takes the next occurrence at once;
  the settler commits everything handed over since its last commit in one transaction
  (:class:`~jobledger.engine.batching.Settler`). Every held lease — running, buffered or settling —
  is renewed together on one heartbeat (:class:`~jobledger.engine.keeper.LeaseKeeper`).
* **Schedules** — with ``planner=True`` (the default) a planner thread runs
  :meth:`jobledger.Planner.tick` whenever a slot falls due (and at least every
  ``plan_interval``), so one command runs schedules and handlers; any number of workers may plan
  at once (slot identity makes them converge on one occurrence per slot).
* **Polling** — when the queue is drained the feeder waits ``poll_interval`` (± ``poll_jitter``)
  on the store's :class:`~jobledger.store.tx.WorkSignal`; an enqueue in the same process (or a
  PostgreSQL ``NOTIFY``) wakes it at once.
* **Shutdown** — :meth:`Worker.stop` (or SIGTERM/SIGINT while :meth:`Worker.run` runs in the
  main thread) stops claiming and gives back the buffered claims; running handlers get
  ``grace_period`` to finish and settle; then the rest are abandoned: handlers are cancelled and
  their leases released (``reason="worker_shutdown"``), so another worker can claim them at once
  with the attempt handed back. A second signal skips the rest of the grace period.
* **Tests** — :meth:`Worker.run_once` claims and runs up to ``limit`` occurrences in the calling
  thread; no threads, no sleeping.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import Any

from ..contract import is_safe_int
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument, SchedulerError
from ..models import Occurrence, RunResult, Settlement
from ..store.base import OwnerLockHandle
from ..version import __version__
from .attempt import SHUTDOWN_REASON
from .batching import ClaimAhead, Settler
from .observe import attempt_fields, notify
from .options import PREFETCH_WINDOW, WorkerOptions
from .runtime import Runtime

__all__ = ["Worker", "WorkerSummary", "metrics_module"]

logger = logging.getLogger("jobledger.worker")

_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

# How long to wait for abandoned handlers to notice cancellation before returning anyway; their
# leases are already released, so a handler that ignores cancellation can no longer settle.
ABANDON_WAIT_S = 2.0
# How long the settler may take to commit what slots handed over, after the slots stopped.
FLUSH_WAIT_S = 10.0


@dataclass(slots=True)
class WorkerSummary:
    """What :meth:`Worker.run` did: settled statuses counted, the leases it gave back, and how
    many claim and settle transactions carried them."""

    statuses: Counter[str] = field(default_factory=Counter)
    released: list[Occurrence] = field(default_factory=list)
    forced: bool = False
    claim_transactions: int = 0
    settle_transactions: int = 0
    plans: int = 0
    reaped: int = 0


class Worker:
    """Runs occurrences with ``runtime`` until stopped (see the module docstring).

    Settings come from ``options`` (a :class:`~jobledger.WorkerOptions`), or as keyword
    arguments with the same names (``Worker(runtime, concurrency=4)``). The lease settings
    (``lease``, ``renew_interval``, ``owner_id``) belong to the runtime: leave them unset or
    equal to the runtime's.
    """

    def __init__(
        self,
        runtime: Runtime,
        options: WorkerOptions | None = None,
        *,
        rng: random.Random | None = None,
        **settings: Any,
    ) -> None:
        if not isinstance(runtime, Runtime):
            raise InvalidArgument("runtime must be a jobledger.Runtime")
        if options is not None and not isinstance(options, WorkerOptions):
            raise InvalidArgument("options must be a jobledger.WorkerOptions")
        options = (
            (options or WorkerOptions()).with_changes(**settings)
            if settings
            else (options or WorkerOptions())
        )
        for name, theirs, ours in (
            ("lease", options.lease, runtime.lease_ms),
            ("renew_interval", options.renew_interval, runtime.renew_interval_ms),
        ):
            if theirs is not None and ms_from_timedelta(theirs, name) != ours:
                raise InvalidArgument(
                    f"{name} is the runtime's setting ({ours} ms here); build the runtime with "
                    "it, or use App.worker(), which does",
                    details={"field": name},
                )
        if options.owner_id is not None and options.owner_id != runtime.owner_id:
            raise InvalidArgument(
                "owner_id is the runtime's setting", details={"field": "owner_id"}
            )
        kinds = options.kinds if options.kinds is not None else runtime.kinds
        if not kinds:
            raise InvalidArgument(
                "the runtime has no handlers: register one (app.handler) or name kinds",
                details={"field": "kinds"},
            )
        self.runtime = runtime
        self.options = options
        self.kinds = frozenset(kinds)
        self._rng = rng or random.Random()
        self._stop = threading.Event()
        self._force = threading.Event()
        self._running = threading.Event()
        self._lock = threading.Lock()
        self._summary = WorkerSummary()
        self._owner_lock: OwnerLockHandle | None = None
        self._feed: ClaimAhead | None = None

    # Convenience views of the options (the figures a supervisor usually wants).
    @property
    def concurrency(self) -> int:
        return self.options.concurrency

    @property
    def prefetch(self) -> int:
        return self.options.effective_prefetch

    @property
    def poll_interval_ms(self) -> int:
        return ms_from_timedelta(self.options.poll_interval, "poll_interval")

    @property
    def grace_period_ms(self) -> int:
        return ms_from_timedelta(self.options.grace_period, "grace_period")

    # -- single steps (tests) ----------------------------------------------------------------

    def run_once(self, limit: int = 1) -> list[RunResult]:
        """Claim and run up to ``limit`` occurrences in this thread; stop early when idle.

        Returns the results of the occurrences that were run (``idle`` is not included).
        """
        if not is_safe_int(limit) or limit < 1:
            raise InvalidArgument("limit must be a positive integer")
        results: list[RunResult] = []
        for _ in range(limit):
            result = self.runtime.run_next(kinds=self.kinds, workspace_id=self.options.workspace_id)
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
        feed = self._feed
        if feed is not None:
            feed.stop_claiming()  # no new claims from now on (only sets an event)

    def run(self, *, install_signal_handlers: bool = True) -> WorkerSummary:
        """Run until :meth:`stop` (or SIGTERM/SIGINT) and a graceful shutdown; blocking.

        Signal handlers are installed only when called from the main thread, and the previous
        handlers are restored on return.
        """
        stop, force = self._stop, self._force
        previous = self._install_signals() if install_signal_handlers else {}
        self._summary = WorkerSummary()
        runtime, options = self.runtime, self.options
        store = runtime.store
        settler = Settler(store)
        feed = ClaimAhead(
            lambda limit: runtime.claim_batch(
                limit, kinds=self.kinds, workspace_id=options.workspace_id
            ),
            capacity=options.concurrency + options.effective_prefetch,
            slots=options.concurrency,
            window_s=(
                ms_from_timedelta(PREFETCH_WINDOW, "prefetch window") / 1000
                if options.adaptive_prefetch
                else None
            ),
            track=runtime.keeper.track,
            untrack=runtime.keeper.untrack,
            wait_for_work=self._wait_for_work,
            generation=lambda: store.work_signal.generation,
            on_error=lambda exc: logger.error("claiming failed: %s", exc, exc_info=exc),
            wake=store.work_signal.notify,
        )
        self._feed = feed
        slots = [
            threading.Thread(
                target=self._slot,
                args=(stop, feed, settler),
                name=f"jobledger-worker-{n}",
                daemon=True,
            )
            for n in range(options.concurrency)
        ]
        helpers: list[threading.Thread] = []
        metrics = None
        runtime.keeper.hold_open()
        try:
            metrics = self._serve_metrics()
            self._announce()
            settler.start()
            feed.start()
            for slot in slots:
                slot.start()
            helpers.append(self._start(self._housekeeping, stop, "jobledger-housekeeping"))
            if options.planner:
                helpers.append(self._start(self._plan_loop, stop, "jobledger-planner"))
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
                store.work_signal.notify()  # an idle feeder waits on it
                self._release(feed.stop())
                self._feed = None
                self._shutdown([slot for slot in slots if slot.ident is not None], force)
                if not settler.close(FLUSH_WAIT_S):
                    logger.warning("some results were not committed; they will run again")
                for helper in helpers:
                    helper.join(timeout=5)
                self._summary.claim_transactions = feed.claims
                self._summary.settle_transactions = settler.batches
                self._farewell()
            finally:
                if metrics is not None:
                    metrics.close()
                runtime.keeper.release_hold()
                self._running.clear()
                self._stop, self._force = threading.Event(), threading.Event()
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        return self._summary

    @staticmethod
    def _start(
        target: Callable[[threading.Event], None], stop: threading.Event, name: str
    ) -> threading.Thread:
        thread = threading.Thread(target=target, args=(stop,), name=name, daemon=True)
        thread.start()
        return thread

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

    def _slot(self, stop: threading.Event, feed: ClaimAhead, settler: Settler) -> None:
        runtime = self.runtime
        try:
            while True:
                claimed = feed.take(stop)
                if claimed is None:
                    return
                # The claim stays counted against the worker's capacity until its result is
                # committed (its lease is held until then), not merely until its handler ends.
                timing = _Release(feed)
                release = _Once(timing)

                def commit(
                    settlement: Settlement,
                    finish: Callable[[Occurrence | BaseException], None],
                    timing: _Release = timing,
                ) -> None:
                    timing.handler_done()
                    settler.submit(settlement, finish)

                def report(result: RunResult, release: _Once = release) -> None:
                    try:
                        self._record(result)
                    finally:
                        release()

                try:
                    running = runtime.start_attempt(
                        claimed.occurrence,
                        None,
                        commit=commit,
                        report=report,
                        claimed_at=claimed.claimed_at,
                    )
                    runtime.execute(running)
                except Exception:
                    logger.exception(
                        "running occurrence %s failed",
                        claimed.occurrence.id,
                        extra=attempt_fields(claimed.occurrence),
                    )
                    release()
        except BaseException:
            # SystemExit from a handler ends a thread silently; say why this slot is gone.
            logger.exception("a worker slot stopped unexpectedly")
            raise

    def _wait_for_work(self, seen: int, stop: threading.Event) -> None:
        if not stop.is_set():
            self.runtime.store.work_signal.wait(seen, self._poll_timeout())

    def _poll_timeout(self) -> float:
        jitter = self.options.poll_jitter
        spread = self._rng.uniform(1 - jitter, 1 + jitter)
        return self.poll_interval_ms * spread / 1000

    def _release(self, claims: list[Occurrence]) -> None:
        """Give back claims no slot started (the prefetch buffer at shutdown)."""
        for occurrence in claims:
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

    def _shutdown(self, slots: list[threading.Thread], force: threading.Event) -> None:
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
        # Repeat until the slots exit: a slot may have started an attempt just before the stop
        # and only registered it after the first call, and that lease must be given back too.
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

    # -- planning and housekeeping ----------------------------------------------------------

    def _plan_loop(self, stop: threading.Event) -> None:
        from ..planning.planner import Planner

        planner = Planner(self.runtime.store)
        longest = ms_from_timedelta(self.options.plan_interval, "plan_interval") / 1000
        while not stop.is_set():
            wait = longest
            try:
                report = planner.tick()
                with self._lock:
                    self._summary.plans += 1
                if report.enqueued:
                    logger.info("planned %d occurrence(s)", len(report.enqueued))
                notify(
                    self.runtime.observer,
                    "planned",
                    report.enqueued,
                    len(report.skipped),
                    report.now,
                )
                if report.next_due_at is not None:
                    wait = min(wait, max(0.0, (report.next_due_at - report.now) / 1000))
            except SchedulerError:
                logger.exception("planning failed; trying again")
                wait = min(wait, self._poll_timeout())
            stop.wait(max(wait, 0.001))

    def _housekeeping(self, stop: threading.Event) -> None:
        """Every ``reap_interval``: end the leases of dead workers. Every
        ``heartbeat_interval``: record this worker alive. At the liveness lock's own
        ``refresh_interval`` (PostgreSQL): check its session, taking the lock back at once if
        the session ended. Every ``prune_interval`` with ``retention``: prune settled history."""
        options = self.options
        seconds = {
            "reap": ms_from_timedelta(options.reap_interval, "reap_interval") / 1000,
            "beat": ms_from_timedelta(options.heartbeat_interval, "heartbeat_interval") / 1000,
            "prune": ms_from_timedelta(options.prune_interval, "prune_interval") / 1000,
        }
        lock = self._owner_lock
        if lock is not None and lock.refresh_interval is not None:
            seconds["liveness"] = ms_from_timedelta(lock.refresh_interval, "refresh") / 1000
        due = dict.fromkeys(seconds, time.monotonic())
        if options.retention is None:
            del due["prune"]
        while not stop.is_set():
            now = time.monotonic()
            for task in [name for name, at in due.items() if at <= now]:
                due[task] = now + seconds[task]
                try:
                    getattr(self, f"_{task}")()
                except SchedulerError:
                    logger.exception("worker housekeeping (%s) failed", task)
            stop.wait(max(0.01, min(due.values()) - time.monotonic()))

    def _reap(self) -> None:
        store, me = self.runtime.store, self.runtime.owner_id
        for holder in store.lease_holders():
            if holder.owner_id != me and store.owner_gone(holder.owner_id):
                expired = store.expire_leases_of(holder.owner_id, reason="owner_gone")
                if expired:
                    logger.warning(
                        "worker %s is gone: ended its %d lease(s) so others take them over now",
                        holder.owner_id,
                        len(expired),
                    )
                    with self._lock:
                        self._summary.reaped += len(expired)

    def _beat(self) -> None:
        self.runtime.store.touch_worker(self.runtime.owner_id)

    def _liveness(self) -> None:
        lock = self._owner_lock
        if lock is not None:
            lock.refresh()

    def _prune(self) -> None:
        retention = self.options.retention
        assert retention is not None
        store = self.runtime.store
        cutoff = store.now() - ms_from_timedelta(retention, "retention")
        report = store.prune(before=max(0, cutoff), actor=self.runtime.owner_id)
        if report.occurrences:
            logger.info("pruned %d settled occurrence(s)", report.occurrences)

    def _serve_metrics(self) -> Any:
        """Serve Prometheus metrics when ``metrics_port`` is set (needs ``jobledger[metrics]``)."""
        options = self.options
        if options.metrics_port is None:
            return None
        metrics = metrics_module()
        observer = self.runtime.observer
        prometheus = observer if isinstance(observer, metrics.PrometheusObserver) else None
        if prometheus is None:
            logger.warning(
                "the runtime has no PrometheusObserver: serving only the store's metrics "
                "(App.worker(metrics_port=…) sets one up)"
            )
        server = metrics.serve_metrics(
            self.runtime.store,
            host=options.metrics_host,
            port=options.metrics_port,
            observer=prometheus,
        )
        logger.info("serving metrics on %s", server.url)
        return server

    def _announce(self) -> None:
        options = self.options
        store = self.runtime.store
        # The liveness lock first: once registered with it, other workers may reap our leases
        # the moment it is free.
        try:
            self._owner_lock = store.hold_owner_lock(self.runtime.owner_id)
        except SchedulerError:
            logger.exception("could not take this worker's liveness lock")
            self._owner_lock = None
        info = {
            "kinds": sorted(self.kinds),
            "concurrency": options.concurrency,
            "prefetch": options.effective_prefetch,
            "planner": options.planner,
            "liveness": "none" if self._owner_lock is None else self._owner_lock.kind,
            "version": __version__,
        }
        try:
            self.runtime.store.register_worker(
                worker_id=self.runtime.owner_id,
                hostname=socket.gethostname() or "localhost",
                pid=os.getpid(),
                info=info,
            )
        except SchedulerError:
            logger.exception("could not record this worker in the store")

    def _farewell(self) -> None:
        try:
            self.runtime.store.stop_worker(self.runtime.owner_id)
        except SchedulerError:
            logger.exception("could not record this worker's stop")
        lock, self._owner_lock = self._owner_lock, None
        if lock is not None:
            lock.close()

    def _record(self, result: RunResult) -> None:
        with self._lock:
            self._summary.statuses[result.status] += 1

    @property
    def summary(self) -> WorkerSummary:
        """A consistent copy of the counts so far (safe to read while the worker runs)."""
        with self._lock:
            current = self._summary
            return WorkerSummary(
                statuses=Counter(current.statuses),
                released=list(current.released),
                forced=current.forced,
                claim_transactions=current.claim_transactions,
                settle_transactions=current.settle_transactions,
                plans=current.plans,
                reaped=current.reaped,
            )


class _Release:
    """Tells the feeder a claim left the worker's hands, and how long its attempt worked.

    The duration the adaptive prefetch learns from ends when the attempt hands its settlement
    to the settler, not when that settlement commits: waiting for a shared commit is not work
    that a buffered claim would queue behind, and counting it would shrink the batches exactly
    when commits are the bottleneck.
    """

    def __init__(self, feed: ClaimAhead) -> None:
        self._feed = feed
        self._started = time.monotonic()
        self._finished: float | None = None

    def handler_done(self) -> None:
        self._finished = time.monotonic()

    def __call__(self) -> None:
        finished = time.monotonic() if self._finished is None else self._finished
        self._feed.done(finished - self._started)


class _Once:
    """Calls ``action`` the first time it is called, never again."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            action, self._action = self._action, None
        if action is not None:
            action()


def metrics_module() -> ModuleType:
    """:mod:`jobledger.metrics`, or a coded error when its extra is not installed (for
    ``metrics_port``)."""
    try:
        from .. import metrics
    except ImportError as exc:
        raise InvalidArgument(
            "metrics_port needs prometheus-client: pip install 'jobledger[metrics]'",
            details={"field": "metrics_port"},
        ) from exc
    return metrics

