"""One claimed attempt, owned from its claim to its report: checks, handler, settlement, report.

:class:`Attempt` follows the reference runtime (``reference/upstream.md`` §3.11 steps 1–6 and
9–15) check for check and in the same order, so an occurrence is never executed unless it is
current, handled, authorized and still leased::

    claim ─▶ 1 job exists? ─▶ 2 same revision? ─▶ 3 handler for kind? ─▶ 4 authorized?
          ─▶ 5 lease still ours ─▶ 6 not cancelled ─▶ handler (lease kept) ─▶ settlement
          ─▶ commit ─▶ report

The claim returns the job as read inside the claiming transaction, so steps 1–2 need no read.
Step 5 keeps the reference's check without its write while the claim is fresh: a claim younger
than one renew interval is certainly still leased (the lease is far longer, and the runtime's
lease keeper renews it), so only an older claim is revalidated with a real renew (and its job
read again); "younger" on the injected monotonic clock. A claim held ahead (``started_at``
unset) is marked started instead (:mod:`.starts`), durably before its handler runs.

Rejections in steps 1–4 and 6 settle the attempt as failed with a ``SCHEDULER_RUNTIME_*`` code:
retryable for ``AUTHORIZATION_UNAVAILABLE`` (the authorizer raised), ``ABORTED`` and
``TIMEOUT``, final (dead letter) for the rest (handler missing: the reference's name,
``SCHEDULER_RUNTIME_ADAPTER_MISSING``).

**A lost lease settles nothing.** If a renewal (the keeper's, or ``renew_lease()``) or the
final settle finds that another owner holds the occurrence (or the lease expired), the context
is cancelled, async handlers' tasks are cancelled, nothing is written, and the run reports
``RunResult(status="aborted", lease_lost=True, error={code: "SCHEDULER_LEASE_LOST", …})``.

Around an attempt: its **host** (the :class:`~jobledger.engine.runtime.Runtime`) keeps its lease
renewed while it is in flight and arms time limits; its **commit** writes the settlement — at once
(:class:`CommitNow`) or with others (the worker's :class:`~jobledger.engine.batching.Settler`) —
and calls back with the outcome; ``on_report`` hears, exactly once, that it is over.

``Attempt.lock`` serialises the decisions that end an attempt (settling, releasing at shutdown,
timing out): exactly one of them wins.
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
from typing import Any, Literal, Protocol

from ..clock import Clock, Monotonic
from ..contract import MAX_SNOOZES, SNOOZE_LIMIT_CODE
from ..errors import InvalidArgument, LeaseLost, RuntimeRejection, SchedulerError
from ..models import Occurrence, RunResult, Settlement
from ..store.base import Store
from .commit import Commit, StartTicket
from .handlers import AuthorizationRequest, Authorizer, Decision, Handler, JobContext, Snooze
from .loop import EventLoopThread
from .observe import NO_OBSERVER, Observer, attempt_fields, notify
from .outcomes import classify_failure, plan_rejection, sanitize_error
from .retry import BackoffPolicy
from .starts import ask_start, await_start
from .watchdog import Watchdog

__all__ = ["SHUTDOWN_REASON", "Attempt", "AttemptHost", "AttemptSettings"]

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
    monotonic: Monotonic
    authorize: Authorizer
    loop: EventLoopThread
    rng: random.Random
    handler_for: Callable[[str], Handler | None]
    retry_policy_for: Callable[[str], BackoffPolicy]
    timeout_for: Callable[[str], int | None]
    observer: Observer = NO_OBSERVER


class AttemptHost(Protocol):
    """What a runtime offers the attempts it runs."""

    @property
    def attempt_settings(self) -> AttemptSettings: ...

    @property
    def watchdog(self) -> Watchdog: ...

    def enter(self, attempt: Attempt) -> None:
        """Keep ``attempt``'s lease renewed and count it in flight; raises (changing nothing)
        when the lease heartbeat cannot start."""
        ...

    def leave(self, attempt: Attempt) -> None:
        """``attempt`` holds its lease no more (settled, lost or released)."""
        ...


AttemptState = Literal["running", "settling", "done", "released", "lost"]


class Attempt:
    """One claimed attempt (see the module docstring). Also a lease holder for the keeper."""

    def __init__(
        self,
        host: AttemptHost,
        claimed: Occurrence,
        *,
        commit: Commit,
        cancel: threading.Event | None = None,
        claimed_at: float | None = None,
        on_report: Callable[[Attempt], None] | None = None,
        start: StartTicket | None = None,
    ) -> None:
        self.host = host
        self.settings = settings = host.attempt_settings
        self.claimed = claimed
        self.cancel = cancel
        # Monotonic seconds when the claim committed: how fresh the lease is (step 5).
        self.claimed_at = settings.monotonic() if claimed_at is None else claimed_at
        self.lock = threading.Lock()
        self.state: AttemptState = "running"
        self.lease_error: LeaseLost | None = None
        self.context: JobContext | None = None
        self.kind = claimed.kind
        self.timed_out = False
        self.result: RunResult | None = None
        # Monotonic seconds from the handler's start to the hand-over of its settlement: the
        # attempt's own work, not the wait for a shared commit (what a prefetch should learn).
        self.work_seconds = 0.0
        self._current = claimed
        self._commit = commit
        self._start = start  # the start mark on its way (a claim held ahead), if any
        self._on_report = on_report
        self._started: float | None = None
        self._alarm: int | None = None
        self._reported = threading.Event()
        self._report_lock = threading.Lock()

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

    # -- the life -----------------------------------------------------------------------------

    def run(self) -> None:
        """The whole attempt in this thread: enter the host, run checks and handler, hand the
        settlement to the commit. Reported (``on_report``) exactly once, possibly later — from
        the commit's callback or, past a time limit, from the watchdog's thread."""
        try:
            self.host.enter(self)
        except Exception:
            # Without a heartbeat the lease would run out under the handler: do not start it,
            # give the attempt back as a retryable failure instead.
            logger.exception(
                "starting the lease heartbeat failed", extra=attempt_fields(self.claimed)
            )
            settlement = self._reject(
                "SCHEDULER_RUNTIME_TIMER_FAILED",
                "Could not start the lease heartbeat",
                retryable=True,
            )
            if settlement is not None:
                self._hand_over(settlement)
            return
        limit = self.settings.timeout_for(self.claimed.kind)
        if limit is not None:
            self._alarm = self.host.watchdog.watch(limit / 1000, lambda: self.time_out(limit))
        notify(self.settings.observer, "started", self.claimed)
        monotonic = self.settings.monotonic
        self._started = monotonic()
        try:
            settlement = self._execute()
        except BaseException as exc:
            self.work_seconds = monotonic() - self._started
            self._end()
            self._report(RunResult("aborted", self.claimed, error={"code": type(exc).__name__}))
            raise
        self._disarm()
        if settlement is not None:
            self._hand_over(settlement)
            return
        self.work_seconds = monotonic() - self._started
        if self.timed_out:
            return  # the time limit's settlement reports this attempt
        self._end()
        self._report(self.gone())

    def wait_reported(self) -> RunResult:
        """Block until this attempt reported its result (a time limit reports from the
        watchdog's thread); return it."""
        self._reported.wait()
        assert self.result is not None
        return self.result

    def _hand_over(self, settlement: Settlement) -> None:
        if self._started is not None:
            self.work_seconds = self.settings.monotonic() - self._started
        self._commit.submit(settlement, self._finish)

    def _finish(self, outcome: Occurrence | BaseException) -> None:
        """The commit's callback: the settlement committed (or was refused, or failed)."""
        self._end()
        try:
            result = self._result_of(outcome)
        except BaseException as exc:
            # A storage failure of the settle itself: the lease runs out and the occurrence is
            # retried; the caller that committed sees the error.
            result = RunResult("aborted", self.claimed, error={"code": type(exc).__name__})
        self._report(result)

    def _report(self, result: RunResult) -> None:
        with self._report_lock:
            if self._reported.is_set():
                return
            self.result = result
            try:
                notify(self.settings.observer, "finished", self.claimed, result, self.work_seconds)
                if self._on_report is not None:
                    self._on_report(self)
            finally:
                self._reported.set()

    def _disarm(self) -> None:
        alarm, self._alarm = self._alarm, None
        if alarm is not None:
            self.host.watchdog.cancel(alarm)

    def _end(self) -> None:
        self._disarm()
        self.host.leave(self)

    # -- the steps --------------------------------------------------------------------------

    def _execute(self) -> Settlement | None:
        """Run checks 1–6 and the handler; return what to settle (``None``: nothing)."""
        settings, occurrence, cancel = self.settings, self.claimed, self.cancel
        monotonic = settings.monotonic
        renew_s = settings.renew_interval_ms / 1000
        job = occurrence.job
        if self._start is None and occurrence.started_at is None:  # waited for at step 5
            self._start = ask_start(self._commit, occurrence, settings.owner_id, settings.lease_ms)
        stale = monotonic() - self.claimed_at >= renew_s
        if job is None or stale:
            # Not read by the claim, or the claim waited long enough for the job to change.
            job = settings.store.get_job(occurrence.job_id)
        if job is None:
            return self._reject(
                "SCHEDULER_RUNTIME_JOB_MISSING", "The occurrence's job does not exist"
            )
        self.kind = job.kind
        # Stale: the job changed how it runs after this occurrence was enqueued (an update of
        # its queue or priority alone leaves run_revision, and the occurrence still runs).
        if not job.binds(occurrence.job_revision):
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
        authorize_started = monotonic()
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
        slow = monotonic() - authorize_started >= renew_s
        if self._start is not None:  # the durable start mark, fenced, renewed the lease
            if not await_start(self, self._start):
                return None
        elif stale or slow or self.lease_error is not None:
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
            load_parents=lambda: settings.store.parent_states(occurrence.id),
            report_progress=settings.store.record_progress,
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
            # The one validation and encoding of the result: stores take a checked settlement
            # as it is.
            settlement = self._checked(outcome="succeeded", result=value)
        except InvalidArgument as exc:
            return self._reject(
                "SCHEDULER_RUNTIME_INVALID_RESULT",
                f"The handler returned a value that is not storable JSON: {exc.message}",
            )
        return self._claim_settling(settlement)

    def _fail(self, error: BaseException) -> Settlement | None:
        if self.state != "running":
            return None
        if isinstance(error, Snooze):
            return self._settle(
                outcome="snoozed",
                retry_at=self.settings.clock() + error.delay_ms,
                error=sanitize_error(
                    RuntimeRejection(
                        f"The handler snoozed more than {MAX_SNOOZES} times",
                        code=SNOOZE_LIMIT_CODE,
                        details={"maxSnoozes": MAX_SNOOZES},
                    )
                ),
                retryable=False,
            )
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

    def _rejection(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        plan = plan_rejection(
            code,
            message,
            retryable=retryable,
            details=details,
            attempt=self.claimed.attempt,
            now=self.settings.clock(),
            policy=self.settings.retry_policy_for(self.kind),
            rng=self.settings.rng,
            kind=self.kind,
        )
        return {
            "outcome": "failed",
            "error": plan.error,
            "retryable": plan.retryable,
            "retry_at": plan.retry_at,
        }

    def _reject(
        self,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        details: dict[str, Any] | None = None,
    ) -> Settlement | None:
        return self._settle(**self._rejection(code, message, retryable=retryable, details=details))

    def _checked(self, **outcome: Any) -> Settlement:
        return Settlement.checked(
            occurrence_id=self.claimed.id,
            owner_id=self.settings.owner_id,
            fence=self.claimed.fence,
            **outcome,
        )

    def _settle(self, **outcome: Any) -> Settlement | None:
        return self._claim_settling(self._checked(**outcome))

    def _claim_settling(self, settlement: Settlement) -> Settlement | None:
        """Claim the right to settle (state running → settling): one ending wins."""
        with self.lock:
            if self.state != "running":
                return None
            self.state = "settling"
        return settlement

    def time_out(self, limit_ms: int) -> None:
        """The kind's time limit passed (the watchdog's thread): fail the attempt (retryable),
        cancel its handler and hand the settlement to the commit — unless it already ended."""
        with self.lock:
            if self.state != "running":
                return
        outcome = self._rejection(
            TIMEOUT_CODE,
            f"The handler ran longer than its time limit of {limit_ms} ms",
            retryable=True,
            details={"timeoutMs": limit_ms, "jobKind": self.kind},
        )
        settlement = self._settle(**outcome)
        if settlement is None:
            return
        self.timed_out = True
        if self.context is not None:
            self.context._cancel("timeout")
        self._hand_over(settlement)

    def _result_of(self, outcome: Occurrence | BaseException) -> RunResult:
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
