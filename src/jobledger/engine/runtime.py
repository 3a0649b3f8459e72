"""The runtime façade: claim occurrences and run each as an
:class:`~jobledger.engine.attempt.Attempt`.

:class:`Runtime` holds the configuration (store, handlers with their retry policy and time
limit per kind, authorizer, lease timing) and the parts every attempt shares: one
:class:`~jobledger.engine.keeper.LeaseKeeper` (one heartbeat renewing every held lease in one
transaction), one :class:`~jobledger.engine.watchdog.Watchdog` (time limits) and one event loop for
``async def`` handlers. Its entry points run one occurrence at a time in the calling thread —
:meth:`~Runtime.run_next`, :meth:`~Runtime.run_occurrence`, :meth:`~Runtime.run_until_idle`,
:meth:`~Runtime.run_claimed` — committing each settlement at once; a
:class:`~jobledger.Worker` drives :meth:`~Runtime.start_attempt` from many slots and
group-commits the settlements instead.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..clock import Clock
from ..contract import MAX_LEASE_MS, is_safe_int, normalize_identifier
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument, NotFound, RuntimeRejection
from ..models import Occurrence, RunResult, RunStatus, Settlement
from ..store.base import Store
from .attempt import SHUTDOWN_REASON, Attempt, AttemptSettings
from .handlers import Authorizer, Handler
from .heartbeat import HeartbeatDriver, ThreadHeartbeat
from .keeper import LeaseKeeper
from .loop import EventLoopThread
from .observe import NO_OBSERVER, Observer, attempt_fields, notify
from .options import DEFAULT_LEASE_MS, MIN_LEASE_MS, default_renew_interval_ms
from .retry import DEFAULT_BACKOFF, BackoffPolicy
from .watchdog import Watchdog

__all__ = ["RunResult", "RunStatus", "Runtime", "RuntimeRunSummary"]

logger = logging.getLogger("jobledger.runtime")

DEFAULT_RUN_LIMIT = 100
MAX_RUN_LIMIT = 10_000
_STORE_METHODS = (
    "claim_next",
    "claim_batch",
    "claim_occurrence",
    "get_job",
    "get_occurrence",
    "renew",
    "renew_batch",
    "settle",
    "settle_batch",
    "release_lease",
)

# What a slot hands a settlement to: commit it now (a runtime) or with others (a worker's
# settler); ``done`` is called with the committed occurrence, a LeaseLost, or the error.
Commit = Callable[[Settlement, Callable[[Occurrence | BaseException], None]], None]


@dataclass(frozen=True, slots=True)
class RuntimeRunSummary:
    """What a run-until-idle did: why it stopped (``idle``, ``aborted``, ``limit_reached``) and
    each run's result, in order. It is also a sequence of those results, so
    ``[result] = run_until_idle(app)`` works."""

    status: Literal["idle", "aborted", "limit_reached"]
    results: tuple[RunResult, ...] = field(default=())

    def __iter__(self) -> Iterator[RunResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, index: int) -> RunResult:
        return self.results[index]


@dataclass(frozen=True, slots=True)
class KindSettings:
    """What a runtime knows about one job kind (its retry policy is in ``Runtime._policies``,
    which ``set_retry_policy`` also fills for kinds without a handler)."""

    handler: Handler
    timeout_ms: int | None = None


def default_owner_id() -> str:
    """``jobledger:<hostname>:<pid>:<8 hex>`` — unique per runtime, readable in the audit log."""
    host = socket.gethostname() or "localhost"
    return f"jobledger:{host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _rejection(code: str, message: str) -> RuntimeRejection:
    return RuntimeRejection(message, code=code)


class Runtime:
    """Runs occurrences from ``store`` with ``handlers`` (job kind → callable).

    ``authorize`` is required: pass a callable receiving an
    :class:`~jobledger.AuthorizationRequest`, or name :func:`jobledger.allow_all` explicitly.
    ``lease_ms`` / ``renew_interval_ms`` time the leases (every held lease is renewed together
    every ``renew_interval_ms``, default a third of the lease); ``clock`` is used for retry
    instants (default: the store's :meth:`~jobledger.Store.now`, which on PostgreSQL is the
    database clock); ``heartbeat`` drives the renewals (a thread by default,
    ``ManualHeartbeat`` in tests); ``retry_policy`` / ``retry_policies`` (per kind) choose
    backoff delays; ``rng`` feeds jitter; ``watchdog`` enforces per-kind time limits;
    ``observer`` hears about claims, attempts and lost leases (metrics).
    """

    def __init__(
        self,
        store: Store,
        *,
        handlers: Mapping[str, Handler] | Iterable[tuple[str, Handler]] | None = None,
        authorize: Authorizer | None = None,
        owner_id: str | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_interval_ms: int | None = None,
        clock: Clock | None = None,
        heartbeat: HeartbeatDriver | None = None,
        retry_policy: BackoffPolicy = DEFAULT_BACKOFF,
        retry_policies: Mapping[str, BackoffPolicy] | None = None,
        rng: random.Random | None = None,
        loop: EventLoopThread | None = None,
        watchdog: Watchdog | None = None,
        observer: Observer | None = None,
    ) -> None:
        missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
        if missing:
            raise RuntimeRejection(
                "store must implement the jobledger Store protocol",
                code="SCHEDULER_RUNTIME_INVALID_STORE",
                details={"missing": missing},
            )
        if authorize is None or not callable(authorize):
            raise _rejection(
                "SCHEDULER_RUNTIME_AUTHORIZER_REQUIRED",
                "an authorize callable is required; pass jobledger.allow_all to allow everything",
            )
        if not is_safe_int(lease_ms) or not MIN_LEASE_MS <= lease_ms <= MAX_LEASE_MS:
            raise _rejection(
                "SCHEDULER_RUNTIME_INVALID_LEASE",
                f"lease_ms must be an integer between {MIN_LEASE_MS} and {MAX_LEASE_MS}",
            )
        interval = (
            default_renew_interval_ms(lease_ms) if renew_interval_ms is None else renew_interval_ms
        )
        if not is_safe_int(interval) or not 1 <= interval < lease_ms:
            raise _rejection(
                "SCHEDULER_RUNTIME_INVALID_RENEW_INTERVAL",
                "renew_interval_ms must be an integer between 1 and lease_ms - 1",
            )
        driver = ThreadHeartbeat() if heartbeat is None else heartbeat
        if not callable(getattr(driver, "start", None)):
            raise _rejection(
                "SCHEDULER_RUNTIME_INVALID_TIMER", "heartbeat must have a start() method"
            )
        if clock is not None and not callable(clock):
            raise InvalidArgument("clock must be a callable returning epoch ms")
        try:
            self.owner_id = normalize_identifier(
                default_owner_id() if owner_id is None else owner_id, "ownerId"
            )
        except InvalidArgument as exc:
            raise InvalidArgument(f"owner_id is invalid: {exc.message}") from exc
        self.store = store
        self.lease_ms: int = lease_ms
        self.renew_interval_ms: int = interval
        self.clock: Clock = store.now if clock is None else clock
        self._authorize = authorize
        self._rng = rng or random.Random()
        self._default_policy = self._check_policy(retry_policy, "retry_policy")
        self._kinds: dict[str, KindSettings] = {}
        self._policies: dict[str, BackoffPolicy] = {}
        self._loop = loop or EventLoopThread()
        self._owns_loop = loop is None
        self._watchdog = watchdog
        self._owns_watchdog = watchdog is None
        if observer is not None and not isinstance(observer, Observer):
            raise InvalidArgument("observer must be a jobledger.engine.observe.Observer")
        self.observer: Observer = observer or NO_OBSERVER
        self.keeper = LeaseKeeper(
            store, owner_id=self.owner_id, lease_ms=lease_ms, interval_ms=interval, driver=driver
        )
        self._active: dict[int, Attempt] = {}
        self._active_lock = threading.Lock()
        self._attempt_settings: AttemptSettings | None = None
        for kind, handler in _kind_pairs(handlers, "handlers"):
            self.register_handler(kind, handler)
        for kind, policy in _kind_pairs(retry_policies, "retry_policies"):
            self.set_retry_policy(kind, policy)

    # -- configuration ----------------------------------------------------------------------

    @staticmethod
    def _check_policy(policy: object, field: str) -> BackoffPolicy:
        if not isinstance(policy, BackoffPolicy):
            raise RuntimeRejection(
                f"{field} must have a delay_ms(attempt, rng) method",
                code="SCHEDULER_RUNTIME_INVALID_RETRY_POLICY",
            )
        return policy

    @staticmethod
    def normalize_kind(kind: object) -> str:
        """A handler's job kind: an identifier of at most 128 characters."""
        try:
            return normalize_identifier(kind, "kind", max_length=128)
        except InvalidArgument as exc:
            raise RuntimeRejection(
                "a handler's kind must be an identifier of at most 128 characters",
                code="SCHEDULER_RUNTIME_INVALID_HANDLER",
            ) from exc

    @classmethod
    def check_handler(cls, kind: object, handler: object, registered: Container[str]) -> str:
        """Validate a handler registration; return the normalized kind.

        ``SCHEDULER_RUNTIME_INVALID_HANDLER`` for a bad kind or a non-callable handler,
        ``SCHEDULER_RUNTIME_DUPLICATE_HANDLER`` when ``registered`` already has the kind.
        """
        key = cls.normalize_kind(kind)
        if not callable(handler):
            raise RuntimeRejection(
                f"the handler for {key!r} must be callable",
                code="SCHEDULER_RUNTIME_INVALID_HANDLER",
            )
        if key in registered:
            raise RuntimeRejection(
                f"a handler for {key!r} is already registered",
                code="SCHEDULER_RUNTIME_DUPLICATE_HANDLER",
            )
        return key

    @staticmethod
    def check_timeout(timeout: object) -> int | None:
        """A kind's time limit as ms (``None``: no limit); at least 1 ms."""
        if timeout is None:
            return None
        return ms_from_timedelta(timeout, "timeout", minimum_ms=1)

    def register_handler(
        self,
        kind: str,
        handler: Handler,
        *,
        retry: BackoffPolicy | None = None,
        timeout: timedelta | None = None,
    ) -> Runtime:
        """Handle job ``kind`` with ``handler``; optionally its own backoff and a time limit per
        attempt (past it the attempt fails as a retryable ``SCHEDULER_RUNTIME_TIMEOUT``).
        Chainable."""
        key = self.check_handler(kind, handler, self._kinds)
        timeout_ms = self.check_timeout(timeout)
        if retry is not None:
            self.set_retry_policy(key, retry)
        self._kinds[key] = KindSettings(handler, timeout_ms)
        return self

    def set_retry_policy(self, kind: str, policy: BackoffPolicy) -> None:
        """Use ``policy`` for retryable failures of job ``kind``."""
        self._policies[self.normalize_kind(kind)] = self._check_policy(policy, "retry policy")

    def retry_policy_for(self, kind: str) -> BackoffPolicy:
        return self._policies.get(kind, self._default_policy)

    def handler_for(self, kind: str) -> Handler | None:
        settings = self._kinds.get(kind)
        return None if settings is None else settings.handler

    def timeout_for(self, kind: str) -> int | None:
        settings = self._kinds.get(kind)
        return None if settings is None else settings.timeout_ms

    @property
    def kinds(self) -> frozenset[str]:
        """The job kinds this runtime has handlers for."""
        return frozenset(self._kinds)

    def _claim_kinds(
        self, job_kind: str | None, kinds: Collection[str] | None
    ) -> Collection[str] | None:
        # Only what this runtime can run, unless the caller names kinds itself: an occurrence
        # of an unknown kind stays queued for a runtime that knows it (a rolling deploy).
        if job_kind is not None or kinds is not None:
            return kinds
        return self.kinds or None

    # -- running one at a time --------------------------------------------------------------

    def run_next(
        self,
        *,
        job_kind: str | None = None,
        kinds: Collection[str] | None = None,
        workspace_id: str | None = None,
        cancel_event: threading.Event | None = None,
    ) -> RunResult:
        """Claim the most overdue occurrence this runtime can run and run it.

        Without ``job_kind``/``kinds`` it claims only kinds it has handlers for (``idle`` if it
        has none registered and nothing else is asked).
        """
        if cancel_event is not None and cancel_event.is_set():
            return RunResult("aborted")
        wanted = self._claim_kinds(job_kind, kinds)
        if wanted is None and job_kind is None and not self._kinds:
            return RunResult("idle")
        claimed = self.store.claim_next(
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            job_kind=job_kind,
            kinds=wanted if job_kind is None else None,
            workspace_id=workspace_id,
        )
        if claimed is None:
            return RunResult("idle")
        notify(self.observer, "claimed", [claimed])
        return self._run_now(claimed, cancel_event)

    def run_claimed(
        self, claimed: Occurrence, *, cancel_event: threading.Event | None = None
    ) -> RunResult:
        """Run an occurrence this runtime already claimed (e.g. from :meth:`claim_batch`)."""
        if claimed.status != "running" or claimed.lease_owner != self.owner_id:
            raise InvalidArgument("run_claimed needs an occurrence claimed by this runtime")
        # How long ago it was claimed (its lease started lease_ms before it expires): a claim
        # that waited longer than a renew interval is revalidated before it runs.
        expires = claimed.lease_expires_at or 0
        age_ms = max(0, self.clock() - (expires - self.lease_ms))
        return self._run_now(claimed, cancel_event, claimed_at=time.monotonic() - age_ms / 1000)

    def claim_batch(
        self,
        limit: int,
        *,
        job_kind: str | None = None,
        kinds: Collection[str] | None = None,
        workspace_id: str | None = None,
    ) -> list[Occurrence]:
        """Claim up to ``limit`` occurrences for this runtime in one transaction (by default only
        kinds it has handlers for)."""
        wanted = self._claim_kinds(job_kind, kinds)
        claimed = self.store.claim_batch(
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            limit=limit,
            job_kind=job_kind,
            kinds=wanted if job_kind is None else None,
            workspace_id=workspace_id,
        )
        if claimed:
            notify(self.observer, "claimed", claimed)
        return claimed

    def run_occurrence(
        self, occurrence_id: str, *, cancel_event: threading.Event | None = None
    ) -> RunResult:
        """Claim and run one occurrence; ``busy`` if it is leased elsewhere or not due yet."""
        key = normalize_identifier(occurrence_id, "occurrenceId")
        current = self.store.get_occurrence(key)
        if current is None:
            raise NotFound(f"Scheduler occurrence does not exist: {key}")
        if current.is_terminal:
            return RunResult(
                current.status,  # type: ignore[arg-type]
                current,
                current.result,
                current.last_error,
                already_settled=True,
            )
        if cancel_event is not None and cancel_event.is_set():
            return RunResult("aborted", current)
        claimed = self.store.claim_occurrence(
            occurrence_id=key, owner_id=self.owner_id, lease_ms=self.lease_ms
        )
        if claimed is None:
            return RunResult("busy", self.store.get_occurrence(key) or current)
        notify(self.observer, "claimed", [claimed])
        return self._run_now(claimed, cancel_event)

    def run_until_idle(
        self,
        *,
        limit: int = DEFAULT_RUN_LIMIT,
        job_kind: str | None = None,
        kinds: Collection[str] | None = None,
        workspace_id: str | None = None,
        cancel_event: threading.Event | None = None,
    ) -> RuntimeRunSummary:
        """Run occurrences one by one until none is claimable, cancelled, or ``limit`` runs."""
        if not is_safe_int(limit) or not 1 <= limit <= MAX_RUN_LIMIT:
            raise _rejection(
                "SCHEDULER_RUNTIME_INVALID_LIMIT",
                f"limit must be an integer between 1 and {MAX_RUN_LIMIT}",
            )
        results: list[RunResult] = []
        for _ in range(limit):
            outcome = self.run_next(
                job_kind=job_kind,
                kinds=kinds,
                workspace_id=workspace_id,
                cancel_event=cancel_event,
            )
            if outcome.status in ("idle", "aborted") and outcome.occurrence is None:
                return RuntimeRunSummary(outcome.status, tuple(results))
            results.append(outcome)
        return RuntimeRunSummary("limit_reached", tuple(results))

    def _run_now(
        self,
        claimed: Occurrence,
        cancel_event: threading.Event | None,
        *,
        claimed_at: float | None = None,
    ) -> RunResult:
        """One attempt in this thread, its settlement committed before returning."""
        done: list[RunResult] = []

        def commit(
            settlement: Settlement, finish: Callable[[Occurrence | BaseException], None]
        ) -> None:
            try:
                [outcome] = self.store.settle_batch([settlement])
            except BaseException as exc:
                finish(exc)
                raise
            finish(outcome)

        running = self.start_attempt(
            claimed, cancel_event, commit=commit, report=done.append, claimed_at=claimed_at
        )
        self.execute(running)
        # A time limit settles from the watchdog's thread; wait for that commit to finish.
        running.wait_reported()
        return done[0]

    # -- attempts (also driven by a worker's slots) -----------------------------------------

    def _settings(self) -> AttemptSettings:
        # One immutable settings object per runtime configuration (handlers and policies are
        # looked up through bound methods, so later registrations are seen).
        if self._attempt_settings is None:
            self._attempt_settings = self._make_settings()
        return self._attempt_settings

    def _make_settings(self) -> AttemptSettings:
        return AttemptSettings(
            store=self.store,
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            renew_interval_ms=self.renew_interval_ms,
            clock=self.clock,
            authorize=self._authorize,
            loop=self._loop,
            rng=self._rng,
            handler_for=self.handler_for,
            retry_policy_for=self.retry_policy_for,
            observer=self.observer,
        )

    def start_attempt(
        self,
        claimed: Occurrence,
        cancel_event: threading.Event | None,
        *,
        commit: Commit,
        report: Callable[[RunResult], None],
        claimed_at: float | None = None,
    ) -> RunningAttempt:
        """Register a claimed occurrence as an attempt of this runtime (lease kept, time limit
        armed); :meth:`execute` then runs it. ``commit`` writes its settlement and ``report``
        receives its :class:`RunResult` once the outcome is known."""
        attempt = Attempt(self._settings(), claimed, cancel_event, claimed_at=claimed_at)
        running = RunningAttempt(self, attempt, commit, report)
        try:
            self.keeper.track(attempt)
        except Exception:
            # Without a heartbeat the lease would run out under the handler: do not start it,
            # give the attempt back as a retryable failure instead.
            logger.exception("starting the lease heartbeat failed", extra=attempt_fields(claimed))
            running.cannot_start()
            return running
        with self._active_lock:
            self._active[id(attempt)] = attempt
        limit = self.timeout_for(claimed.kind)
        if limit is not None:
            running.alarm = self.watchdog.watch(limit / 1000, lambda: running.time_out(limit))
        return running

    def execute(self, running: RunningAttempt) -> None:
        """Run a registered attempt in this thread (see :meth:`start_attempt`)."""
        running.run()

    def _forget(self, attempt: Attempt) -> None:
        self.keeper.untrack(attempt)
        with self._active_lock:
            self._active.pop(id(attempt), None)

    @property
    def watchdog(self) -> Watchdog:
        """The watchdog enforcing time limits (made on first use)."""
        if self._watchdog is None:
            self._watchdog = Watchdog()
        return self._watchdog

    def in_flight(self) -> list[Occurrence]:
        """The claims currently being executed by this runtime."""
        with self._active_lock:
            return [attempt.claimed for attempt in self._active.values()]

    def abandon_all(self, reason: str = SHUTDOWN_REASON) -> list[Occurrence]:
        """Give up every in-flight attempt: cancel its handler and release its lease.

        Used by a worker at the end of its shutdown grace period. Each released occurrence is
        claimable again at once, with its attempt handed back (``Store.release_lease``);
        whatever the handler does afterwards is never settled. Returns the released occurrences.
        """
        with self._active_lock:
            attempts = list(self._active.values())
        released: list[Occurrence] = []
        for attempt in attempts:
            occurrence = attempt.release(reason)
            if occurrence is not None:
                self.keeper.untrack(attempt)
                released.append(occurrence)
        return released

    def close(self) -> None:
        """Stop the runtime's heartbeat, watchdog and private event loop. The store stays open."""
        self.keeper.close()
        if self._watchdog is not None and self._owns_watchdog:
            self._watchdog.close()
        if self._owns_loop:
            self._loop.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunningAttempt:
    """An attempt registered with its runtime: runs it, commits its settlement, reports it."""

    def __init__(
        self,
        runtime: Runtime,
        attempt: Attempt,
        commit: Commit,
        report: Callable[[RunResult], None],
    ) -> None:
        self.runtime = runtime
        self.attempt = attempt
        self._commit = commit
        self._report_to = report
        self.alarm: int | None = None
        # Only a caller waiting in this thread (Runtime._run_now) needs to know when the result
        # was reported; a worker's slot moves on. The event is made on demand.
        self._reported = False
        self._reported_event: threading.Event | None = None
        self._reported_lock = threading.Lock()
        self._not_started = False
        self._started = 0.0
        self._duration = 0.0

    def _report(self, result: RunResult) -> None:
        try:
            notify(
                self.runtime.observer,
                "finished",
                self.attempt.claimed,
                result,
                self._duration,
            )
            self._report_to(result)
        finally:
            self._mark_reported()

    def _mark_reported(self) -> None:
        with self._reported_lock:
            self._reported = True
            event = self._reported_event
        if event is not None:
            event.set()

    def wait_reported(self) -> None:
        """Block until this attempt's result was reported (a time limit reports from the
        watchdog's thread)."""
        with self._reported_lock:
            if self._reported:
                return
            if self._reported_event is None:
                self._reported_event = threading.Event()
            event = self._reported_event
        event.wait()

    def cannot_start(self) -> None:
        """The attempt could not be registered: settle it as a retryable timer failure."""
        self._not_started = True
        settlement = self.attempt.reject_unstarted(
            "SCHEDULER_RUNTIME_TIMER_FAILED", "Could not start the lease heartbeat"
        )
        if settlement is not None:
            self._commit(settlement, self._finish)

    def run(self) -> None:
        if self._not_started:
            return
        notify(self.runtime.observer, "started", self.attempt.claimed)
        self._started = time.monotonic()
        try:
            settlement = self.attempt.run()
        except BaseException as exc:
            self._end()
            self._observe_failure(exc)
            raise
        finally:
            self._duration = time.monotonic() - self._started
        self._disarm()
        if settlement is not None:
            self._commit(settlement, self._finish)
            return
        if self.attempt.timed_out:
            return  # the time limit's settlement reports this attempt
        self._end()
        self._report(self.attempt.gone())

    def time_out(self, limit_ms: int) -> None:
        settlement = self.attempt.time_out(limit_ms)
        if settlement is not None:
            self._duration = time.monotonic() - self._started
            self._commit(settlement, self._finish)

    def _finish(self, outcome: Occurrence | BaseException) -> None:
        self._end()
        try:
            result = self.attempt.result_of(outcome)
        except BaseException as exc:
            # A storage failure of the settle itself: the lease runs out and the occurrence is
            # retried; the caller that committed sees the error.
            self._observe_failure(exc)
            self._mark_reported()
            return
        self._report(result)

    def _observe_failure(self, error: BaseException) -> None:
        """Tell the observer the attempt ended without a result (so gauges stay right)."""
        aborted = RunResult("aborted", self.attempt.claimed, error={"code": type(error).__name__})
        notify(self.runtime.observer, "finished", self.attempt.claimed, aborted, self._duration)

    def _disarm(self) -> None:
        if self.alarm is not None:
            self.runtime.watchdog.cancel(self.alarm)
            self.alarm = None

    def _end(self) -> None:
        self._disarm()
        self.runtime._forget(self.attempt)


def _kind_pairs(value: object, field: str) -> list[tuple[Any, Any]]:
    """``value`` (a mapping of kind → item, or an iterable of (kind, item) pairs, or ``None``)
    as a list of pairs; anything else is refused with a coded error."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidArgument(
            f"{field} must be a mapping of job kind to value", details={"field": field}
        )
    pairs = list(value)
    if not all(isinstance(pair, tuple) and len(pair) == 2 for pair in pairs):
        raise InvalidArgument(
            f"{field} must be a mapping of job kind to value, or (kind, value) pairs",
            details={"field": field},
        )
    return pairs
