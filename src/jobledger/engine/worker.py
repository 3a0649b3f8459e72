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
  (:class:`~jobledger.engine.batching.Settler`). A buffered claim's start mark rides in the
  settle that freed its slot; its handler begins once that commit returned
  (:class:`~jobledger.engine.starts.SlotCommit`). Every held lease — running, buffered or settling —
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
  ``grace_period`` to finish and settle (stuck slots, below, are not waited for: their attempts
  are settled already); then the rest are abandoned: handlers are cancelled and
  their leases released (``reason="worker_shutdown"``), so another worker can claim them at once
  with the attempt handed back. A second signal skips the rest of the grace period.
* **Stuck slots** — a sync handler past its time limit is settled on time (a retryable
  ``SCHEDULER_RUNTIME_TIMEOUT``) but, if it ignores cancellation, its thread runs on: Python
  cannot stop it. Its slot is *stuck* until the handler returns: nothing is claimed for it, and
  claims bought ahead that no slot can start are given back at once
  (``reason="worker_slots_stuck"``, the attempt handed back) so another worker takes them. A
  stuck slot is logged once (with its occurrence), counted by the observer
  (``jobledger_worker_stuck_slots``) and in the worker's registry entry (``stuckSlots`` in
  ``jobledger stats``). Once *every* slot has been stuck for ``stuck_grace`` the worker gives up:
  it stops as at shutdown (buffered claims given back, nothing left to renew) and :meth:`run`
  returns with ``gave_up_stuck`` set — ``jobledger worker`` then exits non-zero so its supervisor
  starts a fresh process (:mod:`.stuck`).
* **Housekeeping** — announcing the worker, reaping dead workers' leases, heartbeats, pruning
  and the planner loop belong to :class:`~jobledger.engine.housekeeping.Housekeeper`.
* **Services** — objects with ``start()``/``close()`` that live as long as :meth:`Worker.run`
  (``services=``): :meth:`App.worker <jobledger.App.worker>` adds the Prometheus endpoint this
  way when ``metrics_port`` is set, so the engine never imports the metrics layer.
* **Tests** — :meth:`Worker.run_once` claims and runs up to ``limit`` occurrences in the calling
  thread; no threads, no sleeping.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from ..contract import is_safe_int
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument, SchedulerError
from ..models import Occurrence, RunResult
from .attempt import SHUTDOWN_REASON, Attempt
from .batching import ClaimAhead, Claimed, Settler
from .commit import StartTicket
from .housekeeping import Housekeeper
from .observe import attempt_fields
from .options import PREFETCH_WINDOW, WorkerOptions
from .queues import QueueWatch
from .runtime import Runtime
from .starts import SlotCommit
from .stuck import StuckSlots

__all__ = ["Service", "Worker", "WorkerSummary"]

logger = logging.getLogger("jobledger.worker")

_SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

# How long to wait for abandoned handlers to notice cancellation before returning anyway; their
# leases are already released, so a handler that ignores cancellation can no longer settle.
ABANDON_WAIT_S = 2.0
# How long the settler may take to commit what slots handed over, after the slots stopped.
FLUSH_WAIT_S = 10.0
# Why claims bought ahead are given back when every slot is stuck in a handler past its limit.
STUCK_REASON = "worker_slots_stuck"
# Why claims bought ahead are given back when their queue was paused while they waited.
PAUSED_REASON = "queue_paused"
# How long after a rate window opens an idle worker looks again (its clock and the store's may
# differ by a little; a claim a moment early finds the old window used up and waits again).
WINDOW_LATE_MS = 5


class Service(Protocol):
    """Something that runs as long as a worker does (started before its slots, closed after)."""

    def start(self) -> None: ...

    def close(self) -> None: ...


@dataclass(slots=True)
class WorkerSummary:
    """What :meth:`Worker.run` did: settled statuses counted, the leases it gave back, and how
    many claim and settle transactions carried them; ``gave_up_stuck``: it stopped because every
    slot was stuck past ``stuck_grace`` (a supervisor should start a fresh process)."""

    statuses: Counter[str] = field(default_factory=Counter)
    released: list[Occurrence] = field(default_factory=list)
    forced: bool = False
    claim_transactions: int = 0
    settle_transactions: int = 0
    plans: int = 0
    reaped: int = 0
    gave_up_stuck: bool = False


class Worker:
    """Runs occurrences with ``runtime`` until stopped (see the module docstring).

    Settings come from ``options`` (a :class:`~jobledger.WorkerOptions`), or as keyword
    arguments with the same names (``Worker(runtime, concurrency=4)``). The lease settings
    (``lease``, ``renew_interval``, ``owner_id``) belong to the runtime: leave them unset or
    equal to the runtime's. ``services`` run beside the slots for as long as :meth:`run` does;
    a worker given ``metrics_port`` needs the metrics service among them, which
    :meth:`App.worker <jobledger.App.worker>` (and ``jobledger worker``) add.
    """

    def __init__(
        self,
        runtime: Runtime,
        options: WorkerOptions | None = None,
        *,
        rng: random.Random | None = None,
        services: Sequence[Service] = (),
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
        if not all(callable(getattr(s, "start", None)) for s in services):
            raise InvalidArgument(
                "services must have start() and close()", details={"field": "services"}
            )
        self.runtime = runtime
        self.options = options
        self.kinds = frozenset(kinds)
        self.services = tuple(services)
        self._rng = rng or random.Random()
        self._monotonic = runtime.monotonic
        self._stop = threading.Event()
        self._force = threading.Event()
        self._running = threading.Event()
        self._lock = threading.Lock()
        self._summary = WorkerSummary()
        self._feed: ClaimAhead | None = None
        self._on_result: Callable[[RunResult], None] | None = None
        # Slots whose attempt timed out while their handler still runs.
        self._stuck = StuckSlots(
            concurrency=options.concurrency,
            grace_ms=options.stuck_grace_ms,
            monotonic=self._monotonic,
            observer=runtime.observer,
        )
        self._queue_watch: QueueWatch | None = None
        self.housekeeper = Housekeeper(
            runtime.store,
            owner_id=runtime.owner_id,
            options=options,
            kinds=self.kinds,
            observer=runtime.observer,
            monotonic=self._monotonic,
            record=self._count,
            poll_timeout=self._poll_timeout,
            status=self._stuck.status,
        )

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

    @property
    def stuck_slots(self) -> list[Occurrence]:
        """The occurrences whose handlers keep a slot stuck: their attempts are over (a time
        limit settled them) but their threads still run."""
        return self._stuck.occurrences

    # -- single steps (tests) ----------------------------------------------------------------

    def run_once(self, limit: int = 1) -> list[RunResult]:
        """Claim and run up to ``limit`` occurrences in this thread; stop early when idle.

        Returns the results of the occurrences that were run (``idle`` is not included).
        """
        if not is_safe_int(limit) or limit < 1:
            raise InvalidArgument("limit must be a positive integer")
        results: list[RunResult] = []
        for _ in range(limit):
            result = self.runtime.run_next(
                kinds=self.kinds,
                workspace_id=self.options.workspace_id,
                queues=self.options.queues,
            )
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

    def run(
        self,
        *,
        install_signal_handlers: bool = True,
        on_result: Callable[[RunResult], None] | None = None,
    ) -> WorkerSummary:
        """Run until :meth:`stop` (or SIGTERM/SIGINT) and a graceful shutdown; blocking.

        Signal handlers are installed only when called from the main thread, and the previous
        handlers are restored on return. ``on_result`` hears every attempt's result as it is
        counted (from the slot or settler thread: it must be quick and thread-safe).
        """
        if self.options.metrics_port is not None and not self.services:
            raise InvalidArgument(
                "metrics_port is served by the metrics service, which App.worker() and "
                "`jobledger worker` add; a Worker built directly needs "
                "services=[jobledger.metrics.MetricsService(...)]",
                details={"field": "metrics_port"},
            )
        stop, force = self._stop, self._force
        previous = self._install_signals() if install_signal_handlers else {}
        self._summary = WorkerSummary()
        self._on_result = on_result
        runtime, options = self.runtime, self.options
        store = runtime.store
        settler = Settler(store, monotonic=self._monotonic)
        queues = None if options.queues is None else sorted(options.queues)
        self._queue_watch = QueueWatch(
            store, refresh_s=self._poll_timeout(), monotonic=self._monotonic
        )
        feed = ClaimAhead(
            lambda limit, free, start: runtime.claim_batch(
                limit,
                kinds=self.kinds,
                workspace_id=options.workspace_id,
                queues=queues,
                limited=min(limit, free),
                start=start,
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
            give_back=lambda claims: self._release(claims, STUCK_REASON),
            give_back_paused=lambda claims: self._release(claims, PAUSED_REASON),
            queue_states=self._queue_watch,
            monotonic=self._monotonic,
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
        started: list[Service] = []
        runtime.keeper.hold_open()
        try:
            for service in self.services:
                service.start()
                started.append(service)
            self.housekeeper.announce()
            settler.start()
            feed.start()
            for slot in slots:
                slot.start()
            helpers.append(self._start(self.housekeeper.run, stop, "jobledger-housekeeping"))
            helpers.append(self._start(self.housekeeper.keep_liveness, stop, "jobledger-liveness"))
            if options.planner:
                helpers.append(self._start(self.housekeeper.plan, stop, "jobledger-planner"))
            self._running.set()
            while not stop.wait(0.5):
                if not any(slot.is_alive() for slot in slots):
                    break
                if self._stuck.past_grace():
                    self._give_up_stuck()
                    break
        except BaseException:
            force.set()
            raise
        finally:
            stop.set()
            try:
                store.work_signal.notify()  # an idle feeder waits on it
                self._release(feed.stop(), SHUTDOWN_REASON)
                self._feed = None
                self._shutdown([slot for slot in slots if slot.ident is not None], force)
                if not settler.close(FLUSH_WAIT_S):
                    logger.warning("some results were not committed; they will run again")
                for helper in helpers:
                    helper.join(timeout=5)
                self._summary.claim_transactions = feed.claims
                self._summary.settle_transactions = settler.batches
                self.housekeeper.farewell()
            finally:
                for service in reversed(started):
                    try:
                        service.close()
                    except Exception:
                        logger.exception("closing a worker service failed")
                runtime.keeper.release_hold()
                self._on_result = None
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
        commit = SlotCommit(
            settler, feed, stop, owner_id=runtime.owner_id, lease_ms=runtime.lease_ms
        )
        try:
            while (taken := commit.next()) is not None:
                self._run_claimed(*taken, feed, commit)
            commit.flush()
        except BaseException:
            # SystemExit from a handler ends a thread silently; say why this slot is gone.
            logger.exception("a worker slot stopped unexpectedly")
            raise

    def _run_claimed(
        self, claimed: Claimed, start: StartTicket | None, feed: ClaimAhead, commit: SlotCommit
    ) -> None:
        """Run one buffered claim as an attempt whose settlement the settler group-commits.

        The claim stays counted against the worker's capacity until its result is committed
        (its lease is held until then), not merely until its handler ends; what the adaptive
        prefetch learns is the attempt's own work, up to the hand-over of its settlement.
        """

        # An attempt past its time limit reports (settled) while its handler may still run on
        # this thread: then the slot is stuck until run() returns. The lock orders the two.
        slot = threading.Lock()
        returned = stuck = False
        thread = threading.current_thread()

        def reported(attempt: Attempt) -> None:
            nonlocal stuck
            try:
                if attempt.result is not None:
                    self._record(attempt.result)
            finally:
                with slot:
                    stuck = attempt.timed_out and not returned
                    if stuck:
                        self._stuck.stuck(attempt, thread)
                    feed.done(attempt.work_seconds, stuck=stuck)

        attempt = self.runtime.attempt(
            claimed.occurrence,
            commit=commit,
            claimed_at=claimed.claimed_at,
            on_report=reported,
            start=start,
        )
        try:
            attempt.run()
        except Exception:
            logger.exception(
                "running occurrence %s failed",
                claimed.occurrence.id,
                extra=attempt_fields(claimed.occurrence),
            )
        finally:
            with slot:
                returned = True
                if stuck:
                    self._stuck.freed(attempt, thread)
                    feed.freed()

    def _give_up_stuck(self) -> None:
        """Every slot is stuck past the grace: stop (the caller's shutdown gives back the
        buffered claims; the stuck attempts are settled and renewed no more) and say so."""
        with self._lock:
            self._summary.gave_up_stuck = True
        logger.error(
            "every worker slot (%d) has been stuck past stuck_grace (%s) in a handler that "
            "ignores its time limit (%s): stopping so that a supervisor starts a fresh process",
            self.options.concurrency,
            self.options.stuck_grace,
            ", ".join(o.id for o in self._stuck.occurrences),
        )

    def _wait_for_work(self, seen: int, stop: threading.Event) -> None:
        if not stop.is_set():
            timeout = self._poll_timeout()
            windows = self._queue_watch.last.rate_windows_ms if self._queue_watch else None
            if windows:
                timeout = min(timeout, self._until_next_window(windows))
            self.runtime.store.work_signal.wait(seen, timeout)

    def _until_next_window(self, windows: frozenset[int]) -> float:
        """Seconds until the next rate window opens (windows are aligned to the epoch, SPEC
        §7), on the store's clock: work a rate limit held back is claimable then, not at the
        next poll. A few ms late, so the claim lands in the new window."""
        try:
            now = self.runtime.store.now()
        except SchedulerError:
            return self._poll_timeout()
        return (min(per - now % per for per in windows) + WINDOW_LATE_MS) / 1000

    def _poll_timeout(self) -> float:
        jitter = self.options.poll_jitter
        spread = self._rng.uniform(1 - jitter, 1 + jitter)
        return self.poll_interval_ms * spread / 1000

    def _release(self, claims: list[Occurrence], reason: str) -> None:
        """Give back claims no slot started (the prefetch buffer at shutdown, or when every
        slot is stuck): claimable again at once, with their attempts handed back."""
        for occurrence in claims:
            try:
                released = self.runtime.store.release_lease(
                    occurrence_id=occurrence.id,
                    owner_id=self.runtime.owner_id,
                    fence=occurrence.fence,
                    reason=reason,
                )
            except SchedulerError:
                logger.exception("giving back the unstarted claim on %s failed", occurrence.id)
                continue
            with self._lock:
                self._summary.released.append(released)
        if claims and reason == STUCK_REASON:
            logger.warning(
                "every worker slot is stuck: gave back %d claim(s) for other workers", len(claims)
            )

    def _shutdown(self, slots: list[threading.Thread], force: threading.Event) -> None:
        monotonic = self._monotonic
        deadline = monotonic() + self.grace_period_ms / 1000
        while not force.is_set():
            alive = self._stuck.working(slots)
            remaining = deadline - monotonic()
            if not alive or remaining <= 0:
                break
            alive[0].join(timeout=min(remaining, 0.1))
        if not self._stuck.working(slots):
            return
        self._summary.forced = True
        # Repeat until the slots exit: a slot may have started an attempt just before the stop
        # and only registered it after the first call, and that lease must be given back too.
        abandon_deadline = monotonic() + ABANDON_WAIT_S
        while True:
            released = self.runtime.abandon_all(SHUTDOWN_REASON)
            if released:
                logger.info("gave back %d unfinished lease(s)", len(released))
            with self._lock:
                self._summary.released.extend(released)
            alive = self._stuck.working(slots)
            remaining = abandon_deadline - monotonic()
            if not alive or remaining <= 0:
                break
            alive[0].join(timeout=min(remaining, 0.05))

    # -- the summary ------------------------------------------------------------------------

    def _record(self, result: RunResult) -> None:
        with self._lock:
            self._summary.statuses[result.status] += 1
        listener = self._on_result
        if listener is not None:
            try:
                listener(result)
            except Exception:
                logger.exception("a worker's result listener failed")

    def _count(self, name: str, amount: int) -> None:
        with self._lock:
            setattr(self._summary, name, getattr(self._summary, name) + amount)

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
                gave_up_stuck=current.gave_up_stuck,
            )
