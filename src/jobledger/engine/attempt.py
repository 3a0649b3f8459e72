"""One claimed attempt in flight: the checks, the handler under a kept lease, the settlement.

:class:`Attempt` follows the reference runtime (``reference/upstream.md`` §3.11 steps 1–6 and
9–15) check for check and in the same order, so an occurrence is never executed unless it is
current, handled, authorized and still leased::

    claim ─▶ 1 job exists? ─▶ 2 same revision? ─▶ 3 handler for kind? ─▶ 4 authorized?
          ─▶ 5 lease still ours ─▶ 6 not cancelled ─▶ handler (lease kept) ─▶ settlement

The claim returns the job as read inside the claiming transaction, so steps 1–2 need no read.
Step 5 keeps the reference's check without its write while the claim is fresh: a claim younger
than one renew interval is certainly still leased (the lease is far longer, and the runtime's
lease keeper renews it), so only an older claim — one that waited in a worker's prefetch
buffer — is revalidated with a real renew (and its job read again).

Rejections in steps 1–4 and 6 settle the attempt as failed with a ``SCHEDULER_RUNTIME_*`` code:
retryable for ``AUTHORIZATION_UNAVAILABLE`` (the authorizer raised), ``ABORTED`` and
``TIMEOUT``, final (dead letter) for the rest. The handler-missing code keeps the reference's
name, ``SCHEDULER_RUNTIME_ADAPTER_MISSING``.

**A lost lease settles nothing.** If a renewal (the keeper's, or ``renew_lease()``) or the
final settle finds that another owner holds the occurrence (or the lease expired), the context
is cancelled, async handlers' tasks are cancelled, nothing is written, and the run returns
``RunResult(status="aborted", lease_lost=True, error={code: "SCHEDULER_LEASE_LOST", …})``.

:meth:`Attempt.run` does not write the settlement itself: it returns the
:class:`~jobledger.Settlement` to commit (or ``None`` when there is nothing to settle), so a
runtime can commit it at once and a worker can group-commit it with others. ``Attempt.lock``
serialises the decisions that end an attempt — settling, releasing at shutdown, timing out — so
exactly one of them wins.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ..clock import Clock
from ..contract import normalize_json
from ..errors import InvalidArgument, LeaseLost, RuntimeRejection, SchedulerError
from ..models import Occurrence, RunResult, Settlement
from ..store.base import Store
from .handlers import AuthorizationRequest, Authorizer, Decision, Handler, JobContext
from .loop import EventLoopThread
from .observe import NO_OBSERVER, Observer, attempt_fields, notify
from .outcomes import classify_failure, sanitize_error
from .retry import BackoffPolicy

__all__ = ["SHUTDOWN_REASON", "Attempt", "AttemptSettings"]

logger = logging.getLogger("jobledger.runtime")

SHUTDOWN_REASON = "worker_shutdown"
# What an authorizer sees as its cancel event when the caller gave none: nobody ever sets it
# (one shared event instead of a new one per attempt).
_NOT_CANCELLED = threading.Event()
TIMEOUT_CODE = "SCHEDULER_RUNTIME_TIMEOUT"


@dataclass(frozen=True, slots=True)
class AttemptSettings:
    """What every attempt of one runtime shares."""

    store: Store
    owner_id: str
    lease_ms: int
    renew_interval_ms: int
    clock: Clock
    authorize: Authorizer
    loop: EventLoopThread
    rng: random.Random
    handler_for: Callable[[str], Handler | None]
    retry_policy_for: Callable[[str], BackoffPolicy]
    observer: Observer = NO_OBSERVER


AttemptState = Literal["running", "settling", "done", "released", "lost"]


class Attempt:
    """One claimed attempt (see the module docstring). Also a lease holder for the keeper."""

    def __init__(
        self,
        settings: AttemptSettings,
        claimed: Occurrence,
        cancel: threading.Event | None = None,
        *,
        claimed_at: float | None = None,
    ) -> None:
        self.settings = settings
        self.claimed = claimed
        self.cancel = cancel
        # Monotonic seconds when the claim committed: how fresh the lease is (step 5).
        self.claimed_at = time.monotonic() if claimed_at is None else claimed_at
        self.lock = threading.Lock()
        self.state: AttemptState = "running"
        self.lease_error: LeaseLost | None = None
        self.context: JobContext | None = None
        self.kind = claimed.kind
        self.timed_out = False
        self._current = claimed

    # -- the lease (LeaseHolder) -------------------------------------------------------------

    @property
    def lease(self) -> Occurrence:
        return self._current

    def lease_renewed(self, occurrence: Occurrence) -> None:
        self._current = occurrence
        if self.context is not None:
            self.context.occurrence = occurrence

    def lease_lost(self, error: LeaseLost) -> None:
        with self.lock:
            if self.lease_error is None:
                self.lease_error = error
            first = self.state == "running"
            if first:
                self.state = "lost"
        if first:
            logger.warning(
                "lost the lease on %s; cancelling its handler",
                self.claimed.id,
                extra=attempt_fields(self.claimed),
            )
            notify(self.settings.observer, "lease_lost", self.claimed)
        if self.context is not None:
            self.context._cancel("lease_lost")

    # -- the steps --------------------------------------------------------------------------

    def run(self) -> Settlement | None:
        """Run checks 1–6 and the handler; return what to settle (``None``: nothing)."""
        settings, occurrence, cancel = self.settings, self.claimed, self.cancel
        job = occurrence.job
        stale = time.monotonic() - self.claimed_at >= settings.renew_interval_ms / 1000
        if job is None or stale:
            # Not read by the claim, or the claim waited long enough for the job to change.
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
        authorize_started = time.monotonic()
        request = AuthorizationRequest(job, occurrence, cancel or _NOT_CANCELLED)
        try:
            raw = settings.authorize(request)
            if inspect.isawaitable(raw):
                raw = settings.loop.run(raw)
            decision = Decision.from_value(raw)
        except Exception as exc:
            # Recorded as a retryable rejection; logged too, since the store keeps only its type.
            logger.warning(
                "the authorizer failed for %s",
                occurrence.id,
                exc_info=True,
                extra=attempt_fields(occurrence),
            )
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
        # Step 5: the lease is still ours. A fresh claim certainly is (it has most of its lease
        # left and the keeper renews it); a claim that waited, or a slow authorizer, is
        # revalidated with a real renew, as the reference does after every authorization.
        slow = time.monotonic() - authorize_started >= settings.renew_interval_ms / 1000
        if stale or slow or self.lease_error is not None:
            try:
                self.renew()
            except LeaseLost:
                return None
        if cancel is not None and cancel.is_set():
            return self._reject(
                "SCHEDULER_RUNTIME_ABORTED", "Cancelled before the handler started", retryable=True
            )
        context = JobContext(
            job=job,
            occurrence=self._current,
            decision=decision,
            owner_id=settings.owner_id,
            renew=self.renew,
            external_cancel=cancel,
        )
        self.context = context
        # Released (worker shutdown), lost or timed out while authorizing: the lease is no longer
        # ours to use, so the handler must not start. Checked after the assignment above, so a
        # release either sees the context (and cancels it) or is seen here.
        if self.state != "running":
            context._cancel(SHUTDOWN_REASON if self.state == "released" else "lease_lost")
            return None
        try:
            value = handler(context)
            if inspect.isawaitable(value):
                value = settings.loop.run(value, on_cancel=context.add_cancel_callback)
        except (concurrent.futures.CancelledError, asyncio.CancelledError) as exc:
            if not context.cancel_event.is_set():
                return self._fail(exc)
            return None
        except Exception as exc:
            return self._fail(exc)
        return self._succeed(value)

    # -- outcomes ---------------------------------------------------------------------------

    def _succeed(self, value: object) -> Settlement | None:
        if self.state != "running":
            return None
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
        return self._settlement(outcome="succeeded", result=result)

    def _fail(self, error: BaseException) -> Settlement | None:
        if self.state != "running":
            return None
        plan = classify_failure(
            error,
            attempt=self.claimed.attempt,
            now=self.settings.clock(),
            policy=self.settings.retry_policy_for(self.kind),
            rng=self.settings.rng,
        )
        return self._settlement(
            outcome="failed", error=plan.error, retryable=plan.retryable, retry_at=plan.retry_at
        )

    def _rejection(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
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
                logger.exception(
                    "retry policy for %r failed", self.kind, extra=attempt_fields(self.claimed)
                )
                error = sanitize_error(
                    RuntimeRejection(
                        "The retry policy failed while scheduling a retry",
                        code="SCHEDULER_RUNTIME_ERROR_POLICY_FAILED",
                        details={"errorType": type(exc).__name__, "rejected": code},
                    ),
                    default_code="scheduler_rejected",
                )
                retryable = False
        return {"outcome": "failed", "error": error, "retryable": retryable, "retry_at": retry_at}

    def _reject(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> Settlement | None:
        return self._settlement(
            **self._rejection(code, message, retryable=retryable, details=details)
        )

    def _settlement(self, **outcome: Any) -> Settlement | None:
        """Claim the right to settle (state running → settling) and build the settlement."""
        with self.lock:
            if self.state != "running":
                return None
            self.state = "settling"
        return Settlement(
            occurrence_id=self.claimed.id,
            owner_id=self.settings.owner_id,
            fence=self.claimed.fence,
            **outcome,
        )

    def reject_unstarted(self, code: str, message: str) -> Settlement | None:
        """Settle an attempt that never started (a retryable runtime rejection)."""
        return self._reject(code, message, retryable=True)

    def time_out(self, limit_ms: int) -> Settlement | None:
        """The kind's time limit passed: fail the attempt (retryable) and cancel its handler.

        Returns the settlement to commit, or ``None`` if the attempt already ended otherwise.
        """
        with self.lock:
            if self.state != "running":
                return None
        outcome = self._rejection(
            TIMEOUT_CODE,
            f"The handler ran longer than its time limit of {limit_ms} ms",
            retryable=True,
            details={"timeoutMs": limit_ms, "jobKind": self.kind},
        )
        settlement = self._settlement(**outcome)
        if settlement is not None:
            self.timed_out = True
            if self.context is not None:
                self.context._cancel("timeout")
        return settlement

    def result_of(self, outcome: Occurrence | BaseException) -> RunResult:
        """The run's result once its settlement was committed (or refused)."""
        with self.lock:
            self.state = "done"
        if isinstance(outcome, LeaseLost):
            self.lease_error = outcome
            notify(self.settings.observer, "lease_lost", self.claimed)
            if self.context is not None:
                self.context._cancel("lease_lost")
            return self.gone()
        if isinstance(outcome, BaseException):
            raise outcome
        return RunResult(
            outcome.status,  # type: ignore[arg-type]
            outcome,
            outcome.result,
            outcome.last_error,
            timed_out=self.timed_out,
        )

    def gone(self) -> RunResult:
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
        """Extend the lease now; a lost lease cancels the context and raises ``LeaseLost``."""
        with self.lock:
            if self.lease_error is not None:
                lost = self.lease_error
            elif self.state not in ("running", "settling"):
                lost = LeaseLost(f"The lease on {self.claimed.id} was given back")
            else:
                try:
                    renewed = self.settings.store.renew(
                        occurrence_id=self.claimed.id,
                        owner_id=self.settings.owner_id,
                        fence=self.claimed.fence,
                        lease_ms=self.settings.lease_ms,
                    )
                except LeaseLost as exc:
                    self.lease_error = lost = exc
                    if self.state == "running":
                        self.state = "lost"
                else:
                    self.lease_renewed(renewed)
                    return renewed
        if self.context is not None:
            self.context._cancel("lease_lost")
        raise lost

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
                logger.exception(
                    "releasing %s failed", self.claimed.id, extra=attempt_fields(self.claimed)
                )
        if self.context is not None:
            self.context._cancel(reason)
        return released
