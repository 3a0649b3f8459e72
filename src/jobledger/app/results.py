"""Results and outcome-unknown adjudication (SPEC §9): the App's outcome methods.

``result`` waits for an occurrence to become terminal. The store's
:attr:`~jobledger.Store.settle_signal` wakes the wait as soon as that occurrence settles — on
PostgreSQL in any process, through LISTEN/NOTIFY — and the wait also polls, at intervals that
grow from 20 ms to :data:`MAX_POLL_S` while nothing wakes it, so a lost notification (or SQLite,
where another process's settle sends none) costs at most that long.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from datetime import timedelta
from typing import Any

from .. import contract
from ..clock import monotonic_clock
from ..errors import InvalidArgument, JobFailed, NotFound
from ..models import AdjudicationCase, Occurrence
from .base import AppBase

__all__ = ["FIRST_POLL_S", "MAX_POLL_S", "ResultMethods"]

FIRST_POLL_S = 0.02
MAX_POLL_S = 0.5


def _seconds(timeout: object) -> float:
    if not isinstance(timeout, timedelta):
        raise InvalidArgument("timeout must be a datetime.timedelta", details={"field": "timeout"})
    if timeout < timedelta(0):
        raise InvalidArgument("timeout must not be negative", details={"field": "timeout"})
    return timeout.total_seconds()


def _outcome(occurrence: Occurrence | None, occurrence_id: str) -> tuple[bool, Any]:
    """(done, result) — raising for a missing occurrence or one that ended without a result."""
    if occurrence is None:
        raise NotFound(f"Scheduler occurrence does not exist: {occurrence_id}")
    if occurrence.status == "succeeded":
        return True, occurrence.result
    if occurrence.status in ("dead_letter", "cancelled"):
        error = occurrence.last_error
        code = error.get("code") if isinstance(error, dict) else None
        raise JobFailed(
            f"Occurrence {occurrence.id} ended {occurrence.status}"
            + (f" ({code})" if isinstance(code, str) else ""),
            occurrence=occurrence,
            error=error,
            details={"status": occurrence.status, "errorCode": code},
        )
    return False, None


class ResultMethods(AppBase):
    """Waiting for results; adjudicating outcome-unknown occurrences."""

    def result(self, occurrence_id: str, *, timeout: timedelta) -> Any:
        """The handler's result once ``occurrence_id`` succeeded, waiting at most ``timeout``.

        A dead letter or a cancellation raises :class:`jobledger.JobFailed` (``.error`` is the
        occurrence's last error); not terminal in time raises the builtin :class:`TimeoutError`;
        an unknown id ``SCHEDULER_NOT_FOUND``. The first read of a result is recorded
        (``result_read_at``)."""
        budget = _seconds(timeout)
        store = self.store
        woken = threading.Event()
        unsubscribe = store.settle_signal.subscribe(occurrence_id, woken.set)
        try:
            deadline = monotonic_clock() + budget
            interval = FIRST_POLL_S
            while True:
                woken.clear()
                done, value = _outcome(store.read_result(occurrence_id), occurrence_id)
                if done:
                    return value
                left = deadline - monotonic_clock()
                if left <= 0:
                    raise TimeoutError(
                        f"Occurrence {occurrence_id} did not finish within {timeout}"
                    )
                if not woken.wait(min(interval, left)):
                    interval = min(interval * 2, MAX_POLL_S)
        finally:
            unsubscribe()

    async def result_async(self, occurrence_id: str, *, timeout: timedelta) -> Any:
        """:meth:`result` for coroutines: reads run in a worker thread, the wait itself holds
        no thread (it is woken from the store's settle signal)."""
        budget = _seconds(timeout)
        store = self.store
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            # The loop may have closed while a settle was being signalled.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(woken.set)

        unsubscribe = store.settle_signal.subscribe(occurrence_id, wake)
        try:
            deadline = loop.time() + budget
            interval = FIRST_POLL_S
            while True:
                woken.clear()
                found = await asyncio.to_thread(store.read_result, occurrence_id)
                done, value = _outcome(found, occurrence_id)
                if done:
                    return value
                left = deadline - loop.time()
                if left <= 0:
                    raise TimeoutError(
                        f"Occurrence {occurrence_id} did not finish within {timeout}"
                    )
                try:
                    await asyncio.wait_for(woken.wait(), min(interval, left))
                except TimeoutError:
                    interval = min(interval * 2, MAX_POLL_S)
        finally:
            unsubscribe()

    # -- adjudication ------------------------------------------------------------------------

    def adjudication_cases(self, limit: int = 50) -> list[AdjudicationCase]:
        """Occurrences waiting for a decision (outcome unknown), most recently settled first."""
        return self.store.adjudication_cases(limit=limit)

    def get_adjudication_case(self, occurrence_id: str) -> AdjudicationCase | None:
        """The adjudication case of ``occurrence_id`` (``.eligible``: may it be decided now)."""
        return self.store.get_adjudication_case(occurrence_id)

    def adjudicate(
        self,
        occurrence_id: str,
        *,
        decision: str,
        evidence_digest: str,
        reason: str,
        actor: str | None = None,
        result: Any = contract.NO_RESULT,
    ) -> AdjudicationCase:
        """Record the decision on an outcome-unknown occurrence (SPEC §9): ``"applied"`` settles
        it succeeded without running the handler — with ``result`` as its result when given
        (what the handler would have returned, which its children read in ``ctx.parents``),
        else ``{"adjudication": "applied", "requestId": …}``; ``"not_applied"`` runs it exactly
        once more.
        ``evidence_digest`` is the case's, as read (a stale one raises
        ``SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT``); a second decision raises
        ``SCHEDULER_ADJUDICATION_ALREADY_RECORDED``."""
        return self.store.adjudicate(
            occurrence_id=occurrence_id,
            decision=decision,
            evidence_digest=evidence_digest,
            reason=reason,
            actor=actor or f"app:{self.name}",
            result=result,
        )
