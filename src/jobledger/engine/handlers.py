"""What handler code sees and raises: :class:`JobContext`, :class:`Retry`, :class:`Fail`, and the
authorization vocabulary (:class:`AuthorizationRequest`, :class:`Decision`, :func:`allow_all`).

A handler is a plain callable taking one :class:`JobContext`, either ``def`` or ``async def``.
Its return value (JSON) becomes the occurrence's result. To end an attempt otherwise:

* ``raise Retry(delay=…)`` / ``raise Retry(at=…)`` — retry later at a chosen time;
* ``raise Fail("why")`` — fail for good (dead letter), as does any exception whose
  ``retryable`` attribute is ``False``;
* any other exception — a retryable failure, retried after the job kind's backoff.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeAlias

from ..contract import MAX_SNOOZE_DELAY_MS, OUTCOME_UNKNOWN_CODE, normalize_epoch_ms
from ..durations import choose_ms, epoch_ms_from, ms_from_timedelta
from ..errors import InvalidArgument, LeaseLost
from ..models import Job, Occurrence, ParentState, Progress

__all__ = [
    "AttemptFacts",
    "AuthorizationRequest",
    "Authorizer",
    "Decision",
    "Fail",
    "Handler",
    "JobContext",
    "OutcomeUnknown",
    "Retry",
    "Snooze",
    "allow_all",
]

logger = logging.getLogger("jobledger.runtime")

MAX_DECISION_REASON = 256


class Retry(Exception):
    """Raised by a handler to ask for another attempt, ``delay`` from now or ``at`` an instant.

    ``delay`` is a :class:`timedelta` (or ``delay_ms``, whole milliseconds); ``at`` is an aware
    :class:`datetime` (or ``at_ms``, epoch milliseconds). With none of them, the job kind's
    backoff policy chooses the delay. When no attempts remain the occurrence is dead-lettered as
    for any failure.
    """

    retryable = True

    def __init__(
        self,
        message: str = "Retry requested",
        *,
        delay: timedelta | None = None,
        delay_ms: int | None = None,
        at: datetime | None = None,
        at_ms: int | None = None,
        code: str = "retry_requested",
        details: Any = None,
    ) -> None:
        given = [
            name
            for name, value in (
                ("delay", delay),
                ("delay_ms", delay_ms),
                ("at", at),
                ("at_ms", at_ms),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise InvalidArgument(
                f"Retry takes one of delay, delay_ms, at, at_ms (got {', '.join(given)})"
            )
        if at is not None and not isinstance(at, datetime):
            raise InvalidArgument(
                "at must be an aware datetime; pass at_ms=<epoch ms> for a number"
            )
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details
        self.delay_ms: int | None = choose_ms(delay, delay_ms, "delay")
        self.retry_at: int | None = (
            epoch_ms_from(at, "at")
            if at is not None
            else None
            if at_ms is None
            else normalize_epoch_ms(at_ms, "at_ms")
        )


class Fail(Exception):
    """Raised by a handler to fail the occurrence for good (it goes to ``dead_letter``)."""

    retryable = False

    def __init__(
        self, message: str = "Failed", *, code: str = "execution_failed", details: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details


class Snooze(Exception):
    """Raised by a handler to wait ``delay`` and run again, the attempt given back: the next run
    sees the same ``ctx.attempt`` and ``max_attempts`` is unchanged (SPEC §9). An occurrence
    snoozes at most :data:`jobledger.contract.MAX_SNOOZES` times; the snooze past that cap makes
    it a dead letter with code ``SCHEDULER_SNOOZE_LIMIT``."""

    def __init__(self, delay: timedelta) -> None:
        if not isinstance(delay, timedelta):
            raise InvalidArgument("Snooze delay must be a timedelta")
        delay_ms = ms_from_timedelta(delay, "delay")
        if delay_ms > MAX_SNOOZE_DELAY_MS:
            raise InvalidArgument("Snooze delay must be at most 366 days")
        super().__init__(f"Snoozed for {delay}")
        self.delay = delay
        self.delay_ms: int = delay_ms


class OutcomeUnknown(Exception):
    """Raised by a handler that cannot tell whether its side effect happened (a payment call
    that timed out, say): the occurrence becomes a dead letter with code
    ``SCHEDULER_OUTCOME_UNKNOWN``, never retried, waiting for an operator's decision
    (:meth:`jobledger.App.adjudicate`)."""

    retryable = False
    code = OUTCOME_UNKNOWN_CODE

    def __init__(
        self, message: str = "The outcome of the attempt is unknown", *, details: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


# -- authorization ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """What an authorizer is asked about: the job and occurrence snapshots about to run."""

    job: Job
    occurrence: Occurrence
    cancel_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def authority(self) -> dict[str, Any]:
        """The authority envelope snapshotted on the occurrence (evidence, never a grant)."""
        return self.occurrence.authority


@dataclass(frozen=True, slots=True)
class Decision:
    """An authorizer's verdict as the runtime understood it.

    An authorizer may return a :class:`Decision`, any object with an ``allowed`` attribute or a
    mapping with an ``"allowed"`` key. Only ``allowed is True`` allows; anything else denies
    (fail closed, as in the reference): a bare ``True`` or ``False``, ``None``, the truthy
    ``"true"`` or ``1``, or a missing value. ``reason`` is kept when it is
    a string of at most 256 characters.
    """

    allowed: bool
    reason: str | None = None
    raw: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def from_value(cls, value: object) -> Decision:
        """Interpret an authorizer's return value; a raising getter propagates (→ unavailable)."""
        if isinstance(value, Decision):
            return value
        if value is True or value is False:
            return cls(allowed=False, reason=None, raw=value)  # a bare bool is not a decision
        if isinstance(value, Mapping):
            allowed = value.get("allowed")
            reason = value.get("reason")
        elif value is None:
            allowed, reason = None, None
        else:
            allowed = getattr(value, "allowed", None)
            reason = getattr(value, "reason", None)
        text = reason if isinstance(reason, str) and len(reason) <= MAX_DECISION_REASON else None
        return cls(allowed=allowed is True, reason=text, raw=value)


Authorizer: TypeAlias = Callable[[AuthorizationRequest], object]


def allow_all(request: AuthorizationRequest) -> Decision:
    """An authorizer that allows everything. Name it explicitly to opt out of authorization."""
    return Decision(allowed=True, reason="allow_all")


# -- the handler's view ----------------------------------------------------------------------


class AttemptFacts:
    """What every handler context reads off the attempt's occurrence (a thread's
    :class:`JobContext` and a child process's ``IsolatedContext`` alike)."""

    occurrence: Occurrence

    @property
    def payload(self) -> Any:
        return self.occurrence.payload

    @property
    def authority(self) -> dict[str, Any]:
        return self.occurrence.authority

    @property
    def fence(self) -> int:
        return self.occurrence.fence

    @property
    def attempt(self) -> int:
        return self.occurrence.attempt

    @property
    def occurrence_id(self) -> str:
        return self.occurrence.id

    @property
    def idempotency_key(self) -> str:
        return self.occurrence.idempotency_key


class JobContext(AttemptFacts):
    """Everything a handler gets: snapshots, the fence, cancellation and a manual lease renewal.

    ``fence`` increases with every claim of the occurrence; guard side effects with
    ``(occurrence.id, fence)`` so a write from a superseded attempt is refused (see
    ``docs/fenced-side-effects.md``). Cancellation is cooperative: poll :meth:`is_cancelled`,
    wait on :attr:`cancel_event`, or ``await`` :meth:`cancelled` in async handlers (their task is
    also cancelled when the lease is lost or the worker gives up on it at shutdown).
    """

    def __init__(
        self,
        *,
        job: Job,
        occurrence: Occurrence,
        decision: Decision,
        owner_id: str,
        renew: Callable[[], Occurrence],
        external_cancel: threading.Event | None = None,
        load_parents: Callable[[], list[ParentState]] | None = None,
        report_progress: Callable[..., Progress] | None = None,
    ) -> None:
        self.job = job
        self.occurrence = occurrence
        self.decision = decision
        self.owner_id = owner_id
        self.cancel_event = threading.Event()
        self.cancel_reason: str | None = None
        self._renew = renew
        self._external_cancel = external_cancel
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._load_parents = load_parents
        self._parents: dict[str, Any] | None = None
        self._report_progress = report_progress

    @property
    def parents(self) -> dict[str, Any]:
        """Parent occurrence id -> its result, for an occurrence enqueued with ``after=``
        (SPEC §10); ``None`` for a parent that failed (under ``on_parent_failure="run"``).
        Read from the store on first use; empty for an occurrence without parents."""
        if self._parents is None:
            if not self.occurrence.parents or self._load_parents is None:
                self._parents = {}
            else:
                self._parents = {
                    parent.occurrence_id: parent.result for parent in self._load_parents()
                }
        return dict(self._parents)

    def is_cancelled(self) -> bool:
        """True once the lease is lost, the worker gives up on this attempt, or the caller's
        ``cancel_event`` is set: stop as soon as it is safe to."""
        external = self._external_cancel
        return self.cancel_event.is_set() or (external is not None and external.is_set())

    async def cancelled(self) -> None:
        """Wait (in an async handler) until this attempt is cancelled."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not waiter.done():
                waiter.set_result(None)

        def wake() -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(resolve)

        self.add_cancel_callback(wake)
        if self._external_cancel is not None and not self.cancel_event.is_set():
            while not waiter.done() and not self._external_cancel.is_set():
                await asyncio.wait([waiter], timeout=0.05)
            return
        await waiter

    def add_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) when this attempt is cancelled; at once if it is."""
        with self._lock:
            if not self.cancel_event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def renew_lease(self) -> Occurrence:
        """Extend the lease now (the runtime also does so every ``renew_interval_ms``).

        Raises :class:`~jobledger.LeaseLost` — and cancels this context — when the lease is gone.
        """
        occurrence = self._renew()
        self.occurrence = occurrence
        return occurrence

    def progress(
        self, done: int | float, total: int | float | None = None, message: str | None = None
    ) -> Progress:
        """Record how far this attempt got — ``done`` of ``total`` (``None``: unknown) and a
        short ``message`` — on the occurrence, where ``jobledger occurrence show`` and the
        dashboard show it. Fenced: only the current lease holder writes it, so a superseded
        attempt raises :class:`~jobledger.LeaseLost` (and this context is cancelled) instead of
        overwriting the newer attempt's. Each call is one small write: report every few
        seconds or steps, not per item of a tight loop."""
        if self._report_progress is None:
            raise InvalidArgument("this context has no store to record progress in")
        try:
            return self._report_progress(
                occurrence_id=self.occurrence.id,
                owner_id=self.owner_id,
                fence=self.occurrence.fence,
                done=done,
                total=total,
                message=message,
            )
        except LeaseLost:
            self._cancel("lease_lost")
            raise

    def _cancel(self, reason: str) -> None:
        with self._lock:
            if self.cancel_event.is_set():
                return
            self.cancel_reason = reason
            self.cancel_event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            # One failing callback must not stop the others, nor the caller (a heartbeat, or a
            # worker releasing every lease at shutdown).
            try:
                callback()
            except Exception:
                logger.exception("a cancel callback failed")


Handler: TypeAlias = Callable[[JobContext], "object | Awaitable[object]"]
