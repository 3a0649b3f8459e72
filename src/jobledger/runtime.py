"""The runtime: claim an occurrence, check it, run its handler under a renewed lease, settle it.

:class:`Runtime` follows the reference runtime (``reference/upstream.md`` §3.11 steps 1–6 and
9–15) check for check and in the same order, so an occurrence is never executed unless it is
current, handled, authorized and still leased::

    claim ─▶ 1 job exists? ─▶ 2 same revision? ─▶ 3 handler for kind? ─▶ 4 authorized?
          ─▶ 5 lease still ours (renew) ─▶ 6 not cancelled ─▶ 9 heartbeat ─▶ handler ─▶ settle

Rejections in steps 1–4 and 6 settle the attempt as failed with a ``SCHEDULER_RUNTIME_*`` code:
retryable for ``AUTHORIZATION_UNAVAILABLE`` (the authorizer raised), ``ABORTED`` and
``TIMER_FAILED``, final (dead letter) for the rest. The handler-missing code keeps the
reference's name, ``SCHEDULER_RUNTIME_ADAPTER_MISSING``, so dashboards and alerts stay
comparable.

**A lost lease settles nothing.** If revalidation (step 5), a heartbeat, ``renew_lease()`` or the
final settle finds that another owner holds the occurrence (or the lease expired), the context
is cancelled, async handlers' tasks are cancelled, nothing is written, and the call returns
``RunResult(status="aborted", lease_lost=True, error={code: "SCHEDULER_LEASE_LOST", …})``.
(The reference rejects with ``LEASE_LOST`` instead; a result keeps worker loops simple, and the
outcome — nothing settled by the loser — is the same.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import random
import socket
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .clock import Clock
from .contract import (
    MAX_LEASE_MS,
    is_safe_int,
    normalize_identifier,
    normalize_json,
)
from .errors import InvalidArgument, LeaseLost, NotFound, RuntimeRejection, SchedulerError
from .handlers import AuthorizationRequest, Authorizer, Decision, Handler, JobContext
from .heartbeat import Heartbeat, HeartbeatDriver, ThreadHeartbeat
from .loop import EventLoopThread
from .models import Occurrence
from .outcomes import classify_failure, sanitize_error
from .retry import DEFAULT_BACKOFF, BackoffPolicy
from .store.base import Store

__all__ = ["RunResult", "RunStatus", "Runtime", "RuntimeRunSummary"]

logger = logging.getLogger("jobledger.runtime")

RunStatus = Literal["succeeded", "retry_wait", "dead_letter", "idle", "busy", "aborted"]

DEFAULT_LEASE_MS = 60_000
MIN_LEASE_MS = 1_000
DEFAULT_RUN_LIMIT = 100
MAX_RUN_LIMIT = 10_000
SHUTDOWN_REASON = "worker_shutdown"
_STORE_METHODS = (
    "claim_next",
    "claim_occurrence",
    "get_job",
    "get_occurrence",
    "renew",
    "settle",
    "release_lease",
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one run produced.

    ``status`` is the settled occurrence's status (``succeeded``, ``retry_wait``,
    ``dead_letter``) or ``idle`` (nothing to claim), ``busy`` (a targeted occurrence is leased
    elsewhere or not due), ``aborted`` (nothing settled: cancelled before claiming, lease lost,
    or released at shutdown — see ``lease_lost`` / ``released``). ``already_settled`` marks a
    targeted run of an occurrence that was already terminal.
    """

    status: RunStatus
    occurrence: Occurrence | None = None
    result: Any = None
    error: Any = None
    already_settled: bool = False
    lease_lost: bool = False
    released: bool = False


@dataclass(frozen=True, slots=True)
class RuntimeRunSummary:
    """What :meth:`Runtime.run_until_idle` did: why it stopped and each settled run."""

    status: Literal["idle", "aborted", "limit_reached"]
    results: tuple[RunResult, ...] = field(default=())


class _Execution:
    """One claimed attempt in flight; ``lock`` serialises settle, renew and release."""

    def __init__(self, claimed: Occurrence) -> None:
        self.claimed = claimed
        self.lock = threading.Lock()
        self.state: Literal["running", "settled", "released"] = "running"
        self.lease_error: LeaseLost | None = None
        self.context: JobContext | None = None
        self.heartbeat: Heartbeat | None = None
        self.kind = ""  # the job's kind once read (selects the retry policy)

    def stop_heartbeat(self) -> None:
        heartbeat, self.heartbeat = self.heartbeat, None
        if heartbeat is not None:
            try:
                heartbeat.stop()
            except Exception:
                logger.exception("stopping a heartbeat failed")


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
        self._active: dict[int, _Execution] = {}
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
    def _check_kind(kind: object) -> str:
        try:
            return normalize_identifier(kind, "kind", max_length=128)
        except InvalidArgument as exc:
            raise RuntimeRejection(
                "a handler's kind must be an identifier of at most 128 characters",
                code="SCHEDULER_RUNTIME_INVALID_HANDLER",
            ) from exc

    def register_handler(
        self, kind: str, handler: Handler, *, retry: BackoffPolicy | None = None
    ) -> Runtime:
        """Handle job ``kind`` with ``handler`` (optionally with its own backoff); chainable."""
        key = self._check_kind(kind)
        if not callable(handler):
            raise RuntimeRejection(
                f"the handler for {key!r} must be callable",
                code="SCHEDULER_RUNTIME_INVALID_HANDLER",
            )
        if key in self._handlers:
            raise RuntimeRejection(
                f"a handler for {key!r} is already registered",
                code="SCHEDULER_RUNTIME_DUPLICATE_HANDLER",
            )
        self._handlers[key] = handler
        if retry is not None:
            self.set_retry_policy(key, retry)
        return self

    def set_retry_policy(self, kind: str, policy: BackoffPolicy) -> None:
        """Use ``policy`` for retryable failures of job ``kind``."""
        self._policies[self._check_kind(kind)] = self._check_policy(policy, "retry policy")

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
            return [execution.claimed for execution in self._active.values()]

    def abandon_all(self, reason: str = SHUTDOWN_REASON) -> list[Occurrence]:
        """Give up every in-flight attempt: cancel its handler and release its lease.

        Used by a worker at the end of its shutdown grace period. Each released occurrence is
        claimable again at once, with its attempt handed back (``Store.release_lease``);
        whatever the handler does afterwards is never settled. Returns the released occurrences.
        """
        with self._active_lock:
            executions = list(self._active.values())
        released: list[Occurrence] = []
        for execution in executions:
            with execution.lock:
                if execution.state != "running":
                    continue
                execution.state = "released"
                try:
                    released.append(
                        self.store.release_lease(
                            occurrence_id=execution.claimed.id,
                            owner_id=self.owner_id,
                            fence=execution.claimed.fence,
                            reason=reason,
                        )
                    )
                except LeaseLost:
                    pass  # already reclaimed elsewhere: nothing of ours to give back
                except SchedulerError:
                    logger.exception("releasing %s failed", execution.claimed.id)
            execution.stop_heartbeat()
            if execution.context is not None:
                execution.context._cancel(reason)
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

    def _execute(self, claimed: Occurrence, cancel_event: threading.Event | None) -> RunResult:
        execution = _Execution(claimed)
        with self._active_lock:
            self._active[id(execution)] = execution
        try:
            return self._run_steps(execution, cancel_event)
        finally:
            execution.stop_heartbeat()
            with self._active_lock:
                self._active.pop(id(execution), None)

    def _run_steps(self, execution: _Execution, cancel: threading.Event | None) -> RunResult:
        occurrence = execution.claimed
        job = self.store.get_job(occurrence.job_id)
        if job is not None:
            execution.kind = job.kind
        if job is None:
            return self._reject(
                execution, "SCHEDULER_RUNTIME_JOB_MISSING", "The occurrence's job does not exist"
            )
        if job.revision != occurrence.job_revision:
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_STALE_REVISION",
                "The job changed after this occurrence was enqueued",
                details={
                    "occurrenceRevision": occurrence.job_revision,
                    "currentRevision": job.revision,
                },
            )
        handler = self._handlers.get(job.kind)
        if handler is None:
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_ADAPTER_MISSING",
                f"No handler is registered for job kind {job.kind!r}",
                details={"jobKind": job.kind},
            )
        request = AuthorizationRequest(job, occurrence, cancel or threading.Event())
        try:
            raw = self._authorize(request)
            if inspect.isawaitable(raw):
                raw = self._loop.run(raw)
            decision = Decision.from_value(raw)
        except Exception as exc:
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_AUTHORIZATION_UNAVAILABLE",
                "The authorizer failed; the attempt will be retried",
                retryable=True,
                details={"errorType": type(exc).__name__},
            )
        if not decision.allowed:
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_AUTHORIZATION_DENIED",
                "The authorizer did not allow this occurrence",
                details={"reason": decision.reason or "not_allowed"},
            )
        lost = self._revalidate(execution)
        if lost is not None:
            return lost
        if cancel is not None and cancel.is_set():
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_ABORTED",
                "Cancelled before the handler started",
                retryable=True,
            )
        context = JobContext(
            job=job,
            occurrence=execution.claimed,
            decision=decision,
            owner_id=self.owner_id,
            renew=lambda: self._renew(execution),
            external_cancel=cancel,
        )
        execution.context = context
        if execution.state == "released":  # abandoned while we were authorizing
            context._cancel(SHUTDOWN_REASON)
            return self._gone(execution)
        try:
            execution.heartbeat = self._heartbeat.start(
                self.renew_interval_ms, lambda: self._beat(execution)
            )
        except Exception:
            logger.exception("starting the heartbeat failed")
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_TIMER_FAILED",
                "Could not start the lease heartbeat",
                retryable=True,
            )
        try:
            value = handler(context)
            if inspect.isawaitable(value):
                value = self._loop.run(value, on_cancel=context.add_cancel_callback)
        except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
            if not context.cancel_event.is_set():
                return self._fail(execution, exc)
            return self._gone(execution)
        except Exception as exc:
            return self._fail(execution, exc)
        finally:
            execution.stop_heartbeat()
        return self._succeed(execution, value, cancel)

    # -- outcomes ---------------------------------------------------------------------------

    def _succeed(
        self, execution: _Execution, value: object, cancel: threading.Event | None
    ) -> RunResult:
        if execution.lease_error is not None or execution.state == "released":
            return self._gone(execution)
        if cancel is not None and cancel.is_set():
            # The handler finished after cancellation; its result is deliberately not committed.
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_ABORTED",
                "Cancelled while the handler ran; the result was not committed",
                retryable=True,
            )
        try:
            result = normalize_json(value, "result")
        except InvalidArgument as exc:
            return self._reject(
                execution,
                "SCHEDULER_RUNTIME_INVALID_RESULT",
                f"The handler returned a value that is not storable JSON: {exc.message}",
            )
        return self._settle(execution, outcome="succeeded", result=result)

    def _fail(self, execution: _Execution, error: BaseException) -> RunResult:
        if execution.lease_error is not None or execution.state == "released":
            return self._gone(execution)
        occurrence = execution.claimed
        plan = classify_failure(
            error,
            attempt=occurrence.attempt,
            now=self.clock(),
            policy=self.retry_policy_for(execution.kind),
            rng=self._rng,
        )
        return self._settle(
            execution,
            outcome="failed",
            error=plan.error,
            retryable=plan.retryable,
            retry_at=plan.retry_at,
        )

    def _reject(
        self,
        execution: _Execution,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> RunResult:
        error = sanitize_error(
            RuntimeRejection(message, code=code, details=details),
            default_code="scheduler_rejected",
        )
        retry_at = None
        if retryable:
            policy = self.retry_policy_for(execution.kind)
            retry_at = self.clock() + policy.delay_ms(execution.claimed.attempt, self._rng)
        return self._settle(
            execution, outcome="failed", error=error, retryable=retryable, retry_at=retry_at
        )

    def _settle(self, execution: _Execution, **outcome: Any) -> RunResult:
        with execution.lock:
            if execution.state != "running":
                settled = None
            else:
                try:
                    settled = self.store.settle(
                        occurrence_id=execution.claimed.id,
                        owner_id=self.owner_id,
                        fence=execution.claimed.fence,
                        **outcome,
                    )
                except LeaseLost as exc:
                    execution.lease_error = exc
                    settled = None
                else:
                    execution.state = "settled"
        if settled is None:
            return self._gone(execution)
        return RunResult(
            settled.status,  # type: ignore[arg-type]
            settled,
            settled.result,
            settled.last_error,
        )

    def _gone(self, execution: _Execution) -> RunResult:
        """Nothing settled: the lease was lost, or the attempt was released at shutdown."""
        try:
            current = self.store.get_occurrence(execution.claimed.id) or execution.claimed
        except SchedulerError:
            current = execution.claimed
        if execution.state == "released":
            error = sanitize_error(
                RuntimeRejection(
                    "The worker gave the lease back before the handler finished",
                    code="SCHEDULER_RUNTIME_ABORTED",
                )
            )
            return RunResult("aborted", current, error=error, released=True)
        lease_error = execution.lease_error or LeaseLost(
            f"Occurrence lease is absent, expired, or owned by another fence: {current.id}"
        )
        return RunResult("aborted", current, error=sanitize_error(lease_error), lease_lost=True)

    # -- leases -----------------------------------------------------------------------------

    def _revalidate(self, execution: _Execution) -> RunResult | None:
        """Step 5: renew once after (possibly slow) authorization; a lost lease ends the run."""
        try:
            self._renew(execution)
        except LeaseLost:
            return self._gone(execution)
        return None

    def _renew(self, execution: _Execution) -> Occurrence:
        with execution.lock:
            if execution.lease_error is not None:
                raise execution.lease_error
            if execution.state != "running":
                raise LeaseLost(f"The lease on {execution.claimed.id} was given back")
            try:
                renewed = self.store.renew(
                    occurrence_id=execution.claimed.id,
                    owner_id=self.owner_id,
                    fence=execution.claimed.fence,
                    lease_ms=self.lease_ms,
                )
            except LeaseLost as exc:
                execution.lease_error = exc
                lost = exc
            else:
                if execution.context is not None:
                    execution.context.occurrence = renewed
                return renewed
        if execution.context is not None:
            execution.context._cancel("lease_lost")
        raise lost

    def _beat(self, execution: _Execution) -> None:
        if execution.state != "running" or execution.lease_error is not None:
            return
        try:
            self._renew(execution)
        except LeaseLost:
            logger.warning("lost the lease on %s; cancelling its handler", execution.claimed.id)
        except SchedulerError:
            # A transient storage failure: the lease may still be valid; try again next beat.
            logger.exception("renewing the lease on %s failed", execution.claimed.id)
