"""Enqueue spans: one ``send <queue>`` span (kind PRODUCER) per enqueue call, whose context is
stored with the occurrences it writes so their attempts continue the enqueuer's trace.

The send span is current while the store writes, so spans of an instrumented database driver
nest under it. Its W3C trace context (``traceparent``, ``tracestate``) is what the store keeps
in ``occurrences.trace_json`` — taken from the span itself, not from the application's global
propagator, so a worker can always read it back whatever propagators each process configured.

A batch (``App.enqueue_many``) is one send span for all its occurrences, and that span's context
is each one's creation context: the messaging conventions' per-message ``create`` spans would
add up to 10,000 spans to one call for no information the attempts' ``messaging.message.id``
does not already give.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import contract
from ..errors import InvalidArgument
from ..models import Occurrence
from . import conventions as sc
from .tracers import Tracers

__all__ = ["NOT_TRACED", "Producer", "Sending", "trace_context_of"]

_W3C = TraceContextTextMapPropagator()
# What ``Producer.send`` returns when nothing is traced: one shared, reusable no-op.
NOT_TRACED: AbstractContextManager[None] = nullcontext(None)


def trace_context_of(span: Span) -> dict[str, str] | None:
    """``span``'s W3C trace context as stored (``None`` for a span with no valid context)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span, Context()))
    return carrier or None


class Sending:
    """One traced enqueue: its send span and the trace context to store with what it writes."""

    __slots__ = ("context", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.context = trace_context_of(span)

    def sent(self, occurrences: Sequence[Occurrence]) -> None:
        """Describe what the enqueue wrote (or found: a deduplicated occurrence keeps the trace
        context of the enqueue that made it)."""
        span = self.span
        if not occurrences or not span.is_recording():
            return
        first = occurrences[0]
        queues = {occurrence.queue for occurrence in occurrences}
        attributes: dict[str, Any] = {sc.JOB_KIND: first.kind}
        if len(queues) == 1:
            attributes[sc.DESTINATION_NAME] = first.queue
            span.update_name(sc.send_span_name(first.queue))
        if len(occurrences) == 1:
            attributes[sc.MESSAGE_ID] = first.id
            attributes[sc.DEDUPLICATED] = first.deduplicated
        else:
            attributes[sc.BATCH_MESSAGE_COUNT] = len(occurrences)
            attributes[sc.DEDUPLICATED_COUNT] = sum(o.deduplicated for o in occurrences)
        span.set_attributes(attributes)


class _SendSpan:
    """The send span, current for the enqueue's duration; an exception ends it with an error
    status and the exception's type (not its message: payloads must not leak into traces)."""

    __slots__ = ("_attributes", "_name", "_scope", "_span", "_tracer")

    def __init__(self, tracer: Tracer, name: str, attributes: dict[str, Any]) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._scope: AbstractContextManager[Span] | None = None
        self._span: Span | None = None

    def __enter__(self) -> Sending:
        self._scope = self._tracer.start_as_current_span(
            self._name,
            kind=SpanKind.PRODUCER,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = self._scope.__enter__()
        return Sending(self._span)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._scope is not None
        assert self._span is not None
        if error is not None:
            code = getattr(error, "code", None)
            self._span.set_attribute(
                sc.ERROR_TYPE, code if isinstance(code, str) else type(error).__name__
            )
            self._span.set_status(trace.StatusCode.ERROR)
        self._scope.__exit__(kind, error, traceback)


class Producer:
    """Send spans from ``tracers``' tracer, or nothing while none is configured."""

    __slots__ = ("_tracers",)

    def __init__(self, tracers: Tracers) -> None:
        self._tracers = tracers

    def send(self, job_id: str, queue: str | None) -> AbstractContextManager[Sending | None]:
        """A context manager around one enqueue call: yields its :class:`Sending`, or ``None``
        when nothing is traced (then it costs one check)."""
        tracer = self._tracers.get()
        if tracer is None:
            return NOT_TRACED
        attributes: dict[str, Any] = {
            sc.SYSTEM: sc.SYSTEM_NAME,
            sc.OPERATION_NAME: "send",
            sc.OPERATION_TYPE: "send",
            sc.JOB_ID: job_id,
        }
        if queue is not None:
            try:
                queue = contract.normalize_queue_name(queue)
            except InvalidArgument:
                queue = None  # the enqueue refuses it; its span is named without it
            else:
                attributes[sc.DESTINATION_NAME] = queue
        return _SendSpan(tracer, sc.send_span_name(queue), attributes)
