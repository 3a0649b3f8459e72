"""Attempt spans: one ``process <queue>`` span (kind CONSUMER) per attempt, a child of the
enqueue's send span — in whichever process or machine the attempt runs — and linked to it, as
the messaging conventions ask of a span processing one message.

:class:`TracingObserver` is an :class:`~jobledger.engine.observe.Observer`: the span starts when
a worker slot starts the attempt (``started``) and ends when its settlement committed
(``finished``), with the outcome — succeeded, retry scheduled (and when), dead-lettered,
cancelled or aborted (lease lost, released at shutdown). Every other hook is passed on to the
observer it wraps (metrics, say), so one runtime has both. :meth:`TracingObserver.wrap_handler`
makes the attempt's span current while its handler runs (an async handler's task too), so the
handler's own spans — HTTP calls, queries — nest under it.

An occurrence enqueued without a trace context (by the planner, by an untraced process, before
tracing was on) starts a trace of its own.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..engine.handlers import Handler, JobContext
from ..engine.observe import NO_OBSERVER, Observer
from ..models import Occurrence
from . import conventions as sc
from .tracers import Tracers

if TYPE_CHECKING:
    from ..models import RunResult

__all__ = ["TracingObserver", "creation_context"]

_W3C = TraceContextTextMapPropagator()
# Outcomes that are not a failure of the attempt: no error status.
_CLEAN = frozenset({"succeeded", "cancelled"})


def creation_context(trace_context: Mapping[str, str] | None) -> Context | None:
    """The context stored by the enqueue, or ``None`` when there is none (or it is invalid)."""
    if not trace_context:
        return None
    extracted = _W3C.extract(dict(trace_context), context=Context())
    if not trace.get_current_span(extracted).get_span_context().is_valid:
        return None
    return extracted


class TracingObserver(Observer):
    """Attempt spans from ``tracers``' tracer; every hook also reaches ``then``."""

    def __init__(self, tracers: Tracers, then: Observer = NO_OBSERVER) -> None:
        self._tracers = tracers
        self.then = then
        # The spans of attempts in flight, by (occurrence id, fence): one per claim.
        self._spans: dict[tuple[str, int], Span] = {}
        self._lock = threading.Lock()

    # -- the attempt's span -------------------------------------------------------------------

    def started(self, occurrence: Occurrence) -> None:
        try:
            self._start(occurrence)
        finally:  # the wrapped observer hears of it even if tracing failed
            self._pass("started", occurrence)

    def finished(self, occurrence: Occurrence, result: RunResult, duration_s: float) -> None:
        try:
            with self._lock:
                span = self._spans.pop((occurrence.id, occurrence.fence), None)
            if span is not None:
                self._end(span, result)
        finally:
            self._pass("finished", occurrence, result, duration_s)

    def span_of(self, occurrence_id: str, fence: int) -> Span | None:
        """The span of the attempt holding ``fence`` on ``occurrence_id``, while it runs."""
        return self._spans.get((occurrence_id, fence))

    def in_flight(self) -> int:
        """How many attempt spans are open (started, not yet finished)."""
        return len(self._spans)

    def _start(self, occurrence: Occurrence) -> None:
        tracer = self._tracers.get()
        if tracer is None:
            return
        parent = creation_context(occurrence.trace_context)
        links: list[Link] = []
        if parent is not None:
            links.append(Link(trace.get_current_span(parent).get_span_context()))
        attributes: dict[str, Any] = {
            sc.SYSTEM: sc.SYSTEM_NAME,
            sc.OPERATION_NAME: "process",
            sc.OPERATION_TYPE: "process",
            sc.DESTINATION_NAME: occurrence.queue,
            sc.MESSAGE_ID: occurrence.id,
            sc.JOB_ID: occurrence.job_id,
            sc.JOB_KIND: occurrence.kind,
            sc.ATTEMPT: occurrence.attempt,
            sc.MAX_ATTEMPTS: occurrence.max_attempts,
            sc.FENCE: occurrence.fence,
            sc.PRIORITY: occurrence.priority,
            sc.RECLAIMED: occurrence.reclaimed,
        }
        if occurrence.partition is not None:
            attributes[sc.PARTITION] = occurrence.partition
        span = tracer.start_span(
            sc.process_span_name(occurrence.queue),
            # No stored context: a root span, not a child of whatever the calling thread runs.
            context=Context() if parent is None else parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        with self._lock:
            self._spans[(occurrence.id, occurrence.fence)] = span

    @staticmethod
    def _end(span: Span, result: RunResult) -> None:
        attributes: dict[str, Any] = {sc.OUTCOME: result.status}
        settled = result.occurrence
        if result.status == "retry_wait" and settled is not None:
            attributes[sc.RETRY_AT_MS] = settled.available_at
        error = result.error if isinstance(result.error, Mapping) else None
        if result.status not in _CLEAN:
            code = error.get("code") if error is not None else None
            attributes[sc.ERROR_TYPE] = code if isinstance(code, str) else result.status
            message = error.get("message") if error is not None else None
            # The stored error's message (bounded, what the store and the dashboard show);
            # never the payload or result.
            span.set_status(StatusCode.ERROR, message if isinstance(message, str) else None)
        span.set_attributes(attributes)
        span.end()

    # -- the handler runs inside the span ----------------------------------------------------

    def wrap_handler(self, handler: Handler) -> Handler:
        """``handler``, run with its attempt's span as the current span."""
        spans = self

        @functools.wraps(handler)
        def traced(context: JobContext) -> Any:
            span = spans.span_of(context.occurrence.id, context.fence)
            if span is None:
                return handler(context)
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                value = handler(context)
            finally:
                otel_context.detach(token)
            if inspect.isawaitable(value):
                return _inside(span, value)
            return value

        return traced

    # -- every other hook --------------------------------------------------------------------

    def _pass(self, hook: str, *args: Any) -> None:
        if self.then is not NO_OBSERVER:
            getattr(self.then, hook)(*args)

    def claimed(self, occurrences: Sequence[Occurrence]) -> None:
        self._pass("claimed", occurrences)

    def lease_lost(self, occurrence: Occurrence) -> None:
        self._pass("lease_lost", occurrence)

    def planned(self, enqueued: Sequence[Occurrence], skipped: int, now: int) -> None:
        self._pass("planned", enqueued, skipped, now)

    def slot_stuck(self, occurrence: Occurrence) -> None:
        self._pass("slot_stuck", occurrence)

    def slot_freed(self, occurrence: Occurrence) -> None:
        self._pass("slot_freed", occurrence)

    def clock_stepped(self, direction: str, seconds: float) -> None:
        self._pass("clock_stepped", direction, seconds)


async def _inside(span: Span, awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` with ``span`` current in the task that runs it."""
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return await awaitable
    finally:
        otel_context.detach(token)
