"""The runtime façade: claim occurrences and run each as an :class:`~jobledger.attempt.Attempt`.

:class:`Runtime` holds the configuration (store, handlers, authorizer, lease and heartbeat
timing, retry policies) and the entry points — :meth:`~Runtime.run_next`,
:meth:`~Runtime.run_occurrence`, :meth:`~Runtime.run_until_idle` — plus
:meth:`~Runtime.abandon_all` for a worker's shutdown. What happens to one claimed attempt (the
reference's checks in order, heartbeats, lost leases, settling) lives in :mod:`jobledger.attempt`.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import uuid
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from .attempt import SHUTDOWN_REASON, Attempt, AttemptSettings, RunResult, RunStatus
from .batching import SettleBatcher
from .clock import Clock
from .contract import MAX_LEASE_MS, is_safe_int, normalize_identifier
from .errors import InvalidArgument, NotFound, RuntimeRejection
from .handlers import Authorizer, Handler
from .heartbeat import HeartbeatDriver, ThreadHeartbeat
from .loop import EventLoopThread
from .models import Occurrence
from .retry import DEFAULT_BACKOFF, BackoffPolicy
from .store.base import Store

__all__ = ["RunResult", "RunStatus", "Runtime", "RuntimeRunSummary"]

DEFAULT_LEASE_MS = 60_000
MIN_LEASE_MS = 1_000
DEFAULT_RUN_LIMIT = 100
MAX_RUN_LIMIT = 10_000
_STORE_METHODS = (
    "claim_next",
    "claim_batch",
    "claim_occurrence",
    "get_job",
    "get_occurrence",
    "renew",
    "settle",
    "settle_batch",
    "release_lease",
)


@dataclass(frozen=True, slots=True)
class RuntimeRunSummary:
    """What :meth:`Runtime.run_until_idle` did: why it stopped and each settled run."""

    status: Literal["idle", "aborted", "limit_reached"]
    results: tuple[RunResult, ...] = field(default=())


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
    ``clock`` is used for retry instants (default: the store's :meth:`~jobledger.Store.now`,
    which on PostgreSQL is the database clock); ``heartbeat`` drives lease renewals
    (:class:`~jobledger.heartbeat.ThreadHeartbeat` by default, ``ManualHeartbeat`` in tests);
    ``retry_policy`` / ``retry_policies`` (per kind) choose backoff delays; ``rng`` feeds jitter.
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
        interval = max(250, lease_ms // 3) if renew_interval_ms is None else renew_interval_ms
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
        self._heartbeat = driver
        self._rng = rng or random.Random()
        self._default_policy = self._check_policy(retry_policy, "retry_policy")
        self._policies: dict[str, BackoffPolicy] = {}
        self._handlers: dict[str, Handler] = {}
        self._loop = loop or EventLoopThread()
        self._owns_loop = loop is None
        self._settles = SettleBatcher(store)
        self._active: dict[int, Attempt] = {}
        self._active_lock = threading.Lock()
        items = handlers.items() if isinstance(handlers, Mapping) else (handlers or ())
        for kind, handler in items:
            self.register_handler(kind, handler)
        for kind, policy in (retry_policies or {}).items():
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

    def register_handler(
        self, kind: str, handler: Handler, *, retry: BackoffPolicy | None = None
    ) -> Runtime:
        """Handle job ``kind`` with ``handler`` (optionally with its own backoff); chainable."""
        key = self.check_handler(kind, handler, self._handlers)
        self._handlers[key] = handler
        if retry is not None:
            self.set_retry_policy(key, retry)
        return self

    def set_retry_policy(self, kind: str, policy: BackoffPolicy) -> None:
        """Use ``policy`` for retryable failures of job ``kind``."""
        self._policies[self.normalize_kind(kind)] = self._check_policy(policy, "retry policy")

    def retry_policy_for(self, kind: str) -> BackoffPolicy:
        return self._policies.get(kind, self._default_policy)

    @property
    def kinds(self) -> frozenset[str]:
        """The job kinds this runtime has handlers for."""
        return frozenset(self._handlers)

    # -- running ----------------------------------------------------------------------------

    def run_next(
        self,
        *,
        job_kind: str | None = None,
        workspace_id: str | None = None,
        cancel_event: threading.Event | None = None,
    ) -> RunResult:
        """Claim the most overdue occurrence (optionally of one kind / workspace) and run it."""
        if cancel_event is not None and cancel_event.is_set():
            return RunResult("aborted")
        claimed = self.store.claim_next(
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            job_kind=job_kind,
            workspace_id=workspace_id,
        )
        if claimed is None:
            return RunResult("idle")
        return self._execute(claimed, cancel_event)

    def run_claimed(
        self, claimed: Occurrence, *, cancel_event: threading.Event | None = None
    ) -> RunResult:
        """Run an occurrence this runtime already claimed (e.g. from :meth:`claim_batch`)."""
        if claimed.status != "running" or claimed.lease_owner != self.owner_id:
            raise InvalidArgument("run_claimed needs an occurrence claimed by this runtime")
        return self._execute(claimed, cancel_event)

    def claim_batch(
        self, limit: int, *, job_kind: str | None = None, workspace_id: str | None = None
    ) -> list[Occurrence]:
        """Claim up to ``limit`` occurrences for this runtime in one transaction."""
        return self.store.claim_batch(
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            limit=limit,
            job_kind=job_kind,
            workspace_id=workspace_id,
        )

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
        return self._execute(claimed, cancel_event)

    def run_until_idle(
        self,
        *,
        limit: int = DEFAULT_RUN_LIMIT,
        job_kind: str | None = None,
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
                job_kind=job_kind, workspace_id=workspace_id, cancel_event=cancel_event
            )
            if outcome.status in ("idle", "aborted") and outcome.occurrence is None:
                return RuntimeRunSummary(outcome.status, tuple(results))
            results.append(outcome)
        return RuntimeRunSummary("limit_reached", tuple(results))

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
                released.append(occurrence)
        return released

    def close(self) -> None:
        """Stop the runtime's private event loop (if it made one). The store stays open."""
        if self._owns_loop:
            self._loop.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- one attempt ------------------------------------------------------------------------

    def _settings(self) -> AttemptSettings:
        return AttemptSettings(
            store=self.store,
            owner_id=self.owner_id,
            lease_ms=self.lease_ms,
            renew_interval_ms=self.renew_interval_ms,
            clock=self.clock,
            authorize=self._authorize,
            heartbeat=self._heartbeat,
            loop=self._loop,
            rng=self._rng,
            handler_for=self._handlers.get,
            retry_policy_for=self.retry_policy_for,
            settle=self._settles.settle,
        )

    def _execute(self, claimed: Occurrence, cancel_event: threading.Event | None) -> RunResult:
        attempt = Attempt(self._settings(), claimed, cancel_event)
        with self._active_lock:
            self._active[id(attempt)] = attempt
        try:
            return attempt.run()
        finally:
            with self._active_lock:
                self._active.pop(id(attempt), None)
