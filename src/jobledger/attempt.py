"""One claimed attempt in flight: the checks, the handler under a renewed lease, the settle.

:class:`Attempt` follows the reference runtime (``reference/upstream.md`` §3.11 steps 1–6 and
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
is cancelled, async handlers' tasks are cancelled, nothing is written, and the run returns
``RunResult(status="aborted", lease_lost=True, error={code: "SCHEDULER_LEASE_LOST", …})``.
(The reference rejects with ``LEASE_LOST`` instead; a result keeps worker loops simple, and the
outcome — nothing settled by the loser — is the same.)

``Attempt.lock`` serialises the three writes an attempt can make — settle, renew, release — so
a worker giving the lease back at shutdown and a handler finishing at the same moment never
both write: whichever takes the lock first wins and the other becomes a no-op.

:class:`~jobledger.Runtime` is the façade that claims occurrences and hands each to an
:class:`Attempt`; this module holds no configuration of its own (:class:`AttemptSettings`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .clock import Clock
from .contract import normalize_json
from .errors import InvalidArgument, LeaseLost, RuntimeRejection, SchedulerError
from .handlers import AuthorizationRequest, Authorizer, Decision, Handler, JobContext
from .heartbeat import Heartbeat, HeartbeatDriver
from .loop import EventLoopThread
from .models import Occurrence, Settlement
from .outcomes import classify_failure, sanitize_error
from .retry import BackoffPolicy
from .store.base import Store

__all__ = ["SHUTDOWN_REASON", "Attempt", "AttemptSettings", "RunResult", "RunStatus"]

logger = logging.getLogger("jobledger.runtime")

RunStatus = Literal["succeeded", "retry_wait", "dead_letter", "idle", "busy", "aborted"]

SHUTDOWN_REASON = "worker_shutdown"


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
class AttemptSettings:
    """What every attempt of one runtime shares (snapshotted from the runtime per claim)."""

    store: Store
    owner_id: str
    lease_ms: int
    renew_interval_ms: int
    clock: Clock
    authorize: Authorizer
    heartbeat: HeartbeatDriver
    loop: EventLoopThread
    rng: random.Random
    handler_for: Callable[[str], Handler | None]
    retry_policy_for: Callable[[str], BackoffPolicy]
    # Store.settle for one attempt; the runtime passes a SettleBatcher's, which commits the
    # settles of concurrent attempts together (see jobledger.batching).
    settle: Callable[[Settlement], Occurrence]


class Attempt:
    """One claimed attempt; :meth:`run` executes it, :meth:`release` gives it up from outside."""

    def __init__(
        self,
        settings: AttemptSettings,
        claimed: Occurrence,
        cancel: threading.Event | None = None,
    ) -> None:
        self.settings = settings
        self.claimed = claimed
        self.cancel = cancel
        self.lock = threading.Lock()
        self.state: Literal["running", "settled", "released"] = "running"
        self.lease_error: LeaseLost | None = None
        self.context: JobContext | None = None
        self.heartbeat: Heartbeat | None = None
        self.kind = ""  # the job's kind once read (selects the retry policy)

    # -- the steps --------------------------------------------------------------------------

    def run(self) -> RunResult:
        try:
            return self._run_steps()
        finally:
            self._stop_heartbeat()

    def _run_steps(self) -> RunResult:
        settings, occurrence, cancel = self.settings, self.claimed, self.cancel
        job = settings.store.get_job(occurrence.job_id)
        if job is None:
            return self._reject(
                "SCHEDULER_RUNTIME_JOB_MISSING", "The occurrence's job does not exist"
            )
        self.kind = job.kind
        if job.revision != occurrence.job_revision:
            return self._reject(
                "SCHEDULER_RUNTIME_STALE_REVISION",
                "The job changed after this occurrence was enqueued",
                details={
                    "occurrenceRevision": occurrence.job_revision,
                    "currentRevision": job.revision,
                },
            )
        handler = settings.handler_for(job.kind)
        if handler is None:
            return self._reject(
                "SCHEDULER_RUNTIME_ADAPTER_MISSING",
                f"No handler is registered for job kind {job.kind!r}",
                details={"jobKind": job.kind},
            )
        request = AuthorizationRequest(job, occurrence, cancel or threading.Event())
        try:
            raw = settings.authorize(request)
            if inspect.isawaitable(raw):
                raw = settings.loop.run(raw)
            decision = Decision.from_value(raw)
        except Exception as exc:
            # Recorded as a retryable rejection; logged too, since the store keeps only its type.
            logger.warning("the authorizer failed for %s", occurrence.id, exc_info=True)
            return self._reject(
                "SCHEDULER_RUNTIME_AUTHORIZATION_UNAVAILABLE",
                "The authorizer failed; the attempt will be retried",
                retryable=True,
                details={"errorType": type(exc).__name__},
            )
        if not decision.allowed:
            return self._reject(
                "SCHEDULER_RUNTIME_AUTHORIZATION_DENIED",
                "The authorizer did not allow this occurrence",
                details={"reason": decision.reason or "not_allowed"},
            )
        try:  # step 5: renew once after (possibly slow) authorization
            self.renew()
        except LeaseLost:
            return self._gone()
        if cancel is not None and cancel.is_set():
            return self._reject(
                "SCHEDULER_RUNTIME_ABORTED", "Cancelled before the handler started", retryable=True
            )
        context = JobContext(
            job=job,
            occurrence=self.claimed,
            decision=decision,
            owner_id=settings.owner_id,
            renew=self.renew,
            external_cancel=cancel,
        )
        self.context = context
        try:
            self.heartbeat = settings.heartbeat.start(settings.renew_interval_ms, self._beat)
        except Exception:
            logger.exception("starting the heartbeat failed")
            return self._reject(
                "SCHEDULER_RUNTIME_TIMER_FAILED",
                "Could not start the lease heartbeat",
                retryable=True,
            )
        # Released (worker shutdown) while authorizing or starting the heartbeat: the lease is
        # no longer ours, so the handler must not start. Checked after both assignments above,
        # so a release either sees the context (and cancels it) or is seen here.
        if self.state == "released":
            context._cancel(SHUTDOWN_REASON)
            return self._gone()
        try:
            value = handler(context)
            if inspect.isawaitable(value):
                value = settings.loop.run(value, on_cancel=context.add_cancel_callback)
        except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
            if not context.cancel_event.is_set():
                return self._fail(exc)
            return self._gone()
        except Exception as exc:
            return self._fail(exc)
        finally:
            self._stop_heartbeat()
        return self._succeed(value)

    # -- outcomes ---------------------------------------------------------------------------

    def _succeed(self, value: object) -> RunResult:
        if self.lease_error is not None or self.state == "released":
            return self._gone()
        if self.cancel is not None and self.cancel.is_set():
            # The handler finished after cancellation; its result is deliberately not committed.
            return self._reject(
                "SCHEDULER_RUNTIME_ABORTED",
                "Cancelled while the handler ran; the result was not committed",
                retryable=True,
            )
        try:
            result = normalize_json(value, "result")
        except InvalidArgument as exc:
            return self._reject(
                "SCHEDULER_RUNTIME_INVALID_RESULT",
                f"The handler returned a value that is not storable JSON: {exc.message}",
            )
        return self._settle(outcome="succeeded", result=result)

    def _fail(self, error: BaseException) -> RunResult:
        if self.lease_error is not None or self.state == "released":
            return self._gone()
        plan = classify_failure(
            error,
            attempt=self.claimed.attempt,
            now=self.settings.clock(),
            policy=self.settings.retry_policy_for(self.kind),
            rng=self.settings.rng,
        )
        return self._settle(
            outcome="failed", error=plan.error, retryable=plan.retryable, retry_at=plan.retry_at
        )

    def _reject(
        self,
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
            policy = self.settings.retry_policy_for(self.kind)
            try:
                retry_at = self.settings.clock() + policy.delay_ms(
                    self.claimed.attempt, self.settings.rng
                )
            except Exception as exc:
                # A broken retry policy is a programming error: surface it as a dead letter
                # (like a failing error classifier) instead of escaping with the lease held.
                logger.exception("retry policy for %r failed", self.kind)
                error = sanitize_error(
                    RuntimeRejection(
                        "The retry policy failed while scheduling a retry",
                        code="SCHEDULER_RUNTIME_ERROR_POLICY_FAILED",
                        details={"errorType": type(exc).__name__, "rejected": code},
                    ),
                    default_code="scheduler_rejected",
                )
                retryable = False
        return self._settle(outcome="failed", error=error, retryable=retryable, retry_at=retry_at)

    def _settle(self, **outcome: Any) -> RunResult:
        with self.lock:
            if self.state != "running":
                settled = None
            else:
                try:
                    settled = self.settings.settle(
                        Settlement(
                            occurrence_id=self.claimed.id,
                            owner_id=self.settings.owner_id,
                            fence=self.claimed.fence,
                            **outcome,
                        )
                    )
                except LeaseLost as exc:
                    self.lease_error = exc
                    settled = None
                else:
                    self.state = "settled"
        if settled is None:
            return self._gone()
        return RunResult(
            settled.status,  # type: ignore[arg-type]
            settled,
            settled.result,
            settled.last_error,
        )

    def _gone(self) -> RunResult:
        """Nothing settled: the lease was lost, or the attempt was released at shutdown."""
        try:
            current = self.settings.store.get_occurrence(self.claimed.id) or self.claimed
        except SchedulerError:
            current = self.claimed
        if self.state == "released":
            error = sanitize_error(
                RuntimeRejection(
                    "The worker gave the lease back before the handler finished",
                    code="SCHEDULER_RUNTIME_ABORTED",
                )
            )
            return RunResult("aborted", current, error=error, released=True)
        lease_error = self.lease_error or LeaseLost(
            f"Occurrence lease is absent, expired, or owned by another fence: {current.id}"
        )
        return RunResult("aborted", current, error=sanitize_error(lease_error), lease_lost=True)

    # -- leases -----------------------------------------------------------------------------

    def renew(self) -> Occurrence:
        """Extend the lease; a lost lease cancels the context and raises :class:`LeaseLost`."""
        with self.lock:
            if self.lease_error is not None:
                raise self.lease_error
            if self.state != "running":
                raise LeaseLost(f"The lease on {self.claimed.id} was given back")
            try:
                renewed = self.settings.store.renew(
                    occurrence_id=self.claimed.id,
                    owner_id=self.settings.owner_id,
                    fence=self.claimed.fence,
                    lease_ms=self.settings.lease_ms,
                )
            except LeaseLost as exc:
                self.lease_error = exc
                lost = exc
            else:
                if self.context is not None:
                    self.context.occurrence = renewed
                return renewed
        if self.context is not None:
            self.context._cancel("lease_lost")
        raise lost

    def _beat(self) -> None:
        if self.state != "running" or self.lease_error is not None:
            return
        try:
            self.renew()
        except LeaseLost:
            if self.state == "running":
                logger.warning("lost the lease on %s; cancelling its handler", self.claimed.id)
        except SchedulerError:
            # A transient storage failure: the lease may still be valid; try again next beat.
            logger.exception("renewing the lease on %s failed", self.claimed.id)

    def release(self, reason: str) -> Occurrence | None:
        """Give the lease back unfinished and cancel the handler; ``None`` if nothing was ours.

        After this the attempt never settles, whatever its handler does.
        """
        released: Occurrence | None = None
        with self.lock:
            if self.state != "running":
                return None
            self.state = "released"
            try:
                released = self.settings.store.release_lease(
                    occurrence_id=self.claimed.id,
                    owner_id=self.settings.owner_id,
                    fence=self.claimed.fence,
                    reason=reason,
                )
            except LeaseLost:
                pass  # already reclaimed elsewhere: nothing of ours to give back
            except SchedulerError:
                # The lease stays until it expires; another worker then reclaims it.
                logger.exception("releasing %s failed", self.claimed.id)
        self._stop_heartbeat()
        if self.context is not None:
            self.context._cancel(reason)
        return released

    def _stop_heartbeat(self) -> None:
        heartbeat, self.heartbeat = self.heartbeat, None
        if heartbeat is not None:
            try:
                heartbeat.stop()
            except Exception:
                logger.exception("stopping a heartbeat failed")
