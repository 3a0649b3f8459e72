r"""The runtime façade: claim occurrences and run each as an
:class:`~jobledger.engine.attempt.Attempt`.

:class:`Runtime` holds the configuration (store, handlers with their retry policy and time
limit per kind, authorizer, lease timing) and the parts every attempt shares: one
:class:`~jobledger.engine.keeper.LeaseKeeper` (one heartbeat renewing every held lease in one
transaction), one :class:`~jobledger.engine.watchdog.Watchdog` (time limits) and one event loop for
``async def`` handlers. Its entry points run one occurrence at a time in the calling thread —
:meth:`~Runtime.run_next`, :meth:`~Runtime.run_occurrence`, :meth:`~Runtime.run_until_idle`,
:meth:`~Runtime.run_claimed` — committing each settlement at once; a
:class:`~jobledger.Worker` runs :meth:`~Runtime.attempt`\ s from many slots and group-commits
their settlements instead. Either way one :class:`~jobledger.engine.attempt.Attempt` owns each
attempt's life; the runtime is its host (:class:`~jobledger.engine.attempt.AttemptHost`).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import uuid
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from ..clock import Clock, Monotonic, monotonic_clock
from ..contract import is_safe_int, normalize_identifier
from ..durations import ms_from_timedelta
from ..errors import InvalidArgument, NotFound, RuntimeRejection
from ..models import Occurrence, RunResult, RunStatus
from ..store.base import Store
from .attempt import SHUTDOWN_REASON, Attempt, AttemptSettings
from .commit import Commit, CommitNow, StartTicket
from .handlers import Authorizer, Handler
from .heartbeat import HeartbeatDriver, ThreadHeartbeat
from .isolation import ProcessHandler, normalize_isolation
from .keeper import LeaseKeeper
from .loop import EventLoopThread
from .observe import NO_OBSERVER, Observer, notify
from .options import DEFAULT_LEASE_MS, LeaseOptions
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
    ``leases`` (a :class:`~jobledger.engine.options.LeaseOptions`) — or ``lease_ms`` /
    ``renew_interval_ms`` — time the leases (every held lease is renewed together every renew
    interval, default a third of the lease); ``clock`` is used for retry instants (default: the
    store's :meth:`~jobledger.Store.now`, which on PostgreSQL is the database clock);
    ``monotonic`` measures elapsed time in this process (how fresh a claim is); ``heartbeat``
    drives the renewals (a thread by default, ``ManualHeartbeat`` in tests); ``retry_policy`` /
    ``retry_policies`` (per kind) choose backoff delays; ``rng`` feeds jitter; ``watchdog``
    enforces per-kind time limits; ``observer`` hears about claims, attempts and lost leases
    (metrics).
    """

    def __init__(
        self,
        store: Store,
        *,
        handlers: Mapping[str, Handler] | Iterable[tuple[str, Handler]] | None = None,
        authorize: Authorizer | None = None,
        owner_id: str | None = None,
        lease_ms: int | None = None,
        renew_interval_ms: int | None = None,
        leases: LeaseOptions | None = None,
        clock: Clock | None = None,
        monotonic: Monotonic = monotonic_clock,
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
        if leases is None:
            leases = LeaseOptions.from_ms(
                DEFAULT_LEASE_MS if lease_ms is None else lease_ms, renew_interval_ms
            )
        elif lease_ms is not None or renew_interval_ms is not None:
            raise InvalidArgument(
                "pass leases or lease_ms/renew_interval_ms, not both", details={"field": "leases"}
            )
        elif not isinstance(leases, LeaseOptions):
            raise InvalidArgument("leases must be a LeaseOptions", details={"field": "leases"})
        if not callable(monotonic):
            raise InvalidArgument("monotonic must be a callable returning seconds")
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
        self.leases = leases
        self.lease_ms: int = leases.lease_ms
        self.renew_interval_ms: int = leases.renew_interval_ms
        self.clock: Clock = store.now if clock is None else clock
        self.monotonic = monotonic
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
            store,
            owner_id=self.owner_id,
            lease_ms=leases.lease_ms,
            interval_ms=leases.renew_interval_ms,
            driver=driver,
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
        isolation: str = "thread",
    ) -> Runtime:
        """Handle job ``kind`` with ``handler``; optionally its own backoff and a time limit per
        attempt (past it the attempt fails as a retryable ``SCHEDULER_RUNTIME_TIMEOUT``).
        ``isolation="process"`` runs each attempt's handler in a child process, killed when
        the attempt ends without it (:mod:`jobledger.engine.isolation`). Chainable."""
        key = self.check_handler(kind, handler, self._kinds)
        timeout_ms = self.check_timeout(timeout)
        if normalize_isolation(isolation) == "process" and not isinstance(handler, ProcessHandler):
            handler = ProcessHandler(key, handler)
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
        queues: Collection[str] | None = None,
        cancel_event: threading.Event | None = None,
    ) -> RunResult:
        """Claim the most overdue occurrence this runtime can run and run it.

        Without ``job_kind``/``kinds`` it claims only kinds it has handlers for (``idle`` if it
        has none registered and nothing else is asked); ``queues`` limits the claim to those
        queues (default: every queue).
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
            queues=queues,
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
        return self._run_now(claimed, cancel_event, claimed_at=self.monotonic() - age_ms / 1000)

    def claim_batch(
        self,
        limit: int,
        *,
        job_kind: str | None = None,
        kinds: Collection[str] | None = None,
        workspace_id: str | None = None,
        queues: Collection[str] | None = None,
        limited: int | None = None,
        start: int | None = None,
    ) -> list[Occurrence]:
        """Claim up to ``limit`` occurrences for this runtime in one transaction (by default only
        kinds it has handlers for; ``queues`` ``None``: every queue), at most ``limited`` of
        them from queues with limits, the first ``start`` marked started (``None``: all; see
        :meth:`Store.claim_batch` — :meth:`run_claimed` marks the others before their
        handlers)."""
        wanted = self._claim_kinds(job_kind, kinds)
        claimed = self.store.claim_batch(
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            limit=limit,
            job_kind=job_kind,
            kinds=wanted if job_kind is None else None,
            workspace_id=workspace_id,
            queues=queues,
            limited=limited,
            start=start,
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
        queues: Collection[str] | None = None,
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
                queues=queues,
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
        attempt = self.attempt(
            claimed, commit=CommitNow(self.store), cancel=cancel_event, claimed_at=claimed_at
        )
        attempt.run()
        # A time limit settles from the watchdog's thread; wait for that commit to finish.
        return attempt.wait_reported()

    # -- hosting attempts (also run by a worker's slots) ------------------------------------

    def attempt(
        self,
        claimed: Occurrence,
        *,
        commit: Commit,
        cancel: threading.Event | None = None,
        claimed_at: float | None = None,
        on_report: Callable[[Attempt], None] | None = None,
        start: StartTicket | None = None,
    ) -> Attempt:
        """An attempt of this runtime for a claimed occurrence; :meth:`Attempt.run` runs it.

        ``commit`` writes its settlement; ``on_report`` hears once that it is over;
        ``claimed_at`` is when the claim committed (this runtime's monotonic seconds); ``start``
        the start mark already on its way, for a claim held ahead (else the attempt asks
        ``commit`` for one when it needs it).
        """
        return Attempt(
            self,
            claimed,
            commit=commit,
            cancel=cancel,
            claimed_at=claimed_at,
            on_report=on_report,
            start=start,
        )

    @property
    def attempt_settings(self) -> AttemptSettings:
        """What every attempt of this runtime shares (made once; handlers and policies are
        looked up through bound methods, so later registrations are seen)."""
        if self._attempt_settings is None:
            self._attempt_settings = AttemptSettings(
                store=self.store,
                owner_id=self.owner_id,
                lease_ms=self.lease_ms,
                renew_interval_ms=self.renew_interval_ms,
                clock=self.clock,
                monotonic=self.monotonic,
                authorize=self._authorize,
                loop=self._loop,
                rng=self._rng,
                handler_for=self.handler_for,
                retry_policy_for=self.retry_policy_for,
                timeout_for=self.timeout_for,
                observer=self.observer,
            )
        return self._attempt_settings

    def enter(self, attempt: Attempt) -> None:
        """Keep ``attempt``'s lease renewed and count it in flight (:class:`AttemptHost`)."""
        self.keeper.track(attempt)
        with self._active_lock:
            self._active[id(attempt)] = attempt

    def leave(self, attempt: Attempt) -> None:
        """``attempt`` is over: stop renewing its lease (:class:`AttemptHost`)."""
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
