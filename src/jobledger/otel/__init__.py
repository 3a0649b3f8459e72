"""OpenTelemetry traces: a span for each enqueue and for each attempt, in one trace.

Needs the optional ``opentelemetry-api`` package (``pip install 'jobledger[otel]'``); nothing in
the core imports this package — :class:`~jobledger.App` imports it on first use, and only when
it is installed. Spans are made only when a tracer provider that records them is configured
(the application's ``trace.set_tracer_provider(...)``, or one given to ``App(tracing=...)``);
otherwise an enqueue costs one check and stores no trace context.

* An enqueue (``App.enqueue``, ``App.enqueue_many``) is a ``send <queue>`` span, kind PRODUCER
  (:mod:`.producer`); its W3C trace context is stored with the occurrences it writes
  (``occurrences.trace_json``).
* Each attempt is a ``process <queue>`` span, kind CONSUMER, child of and linked to that context
  (:mod:`.consumer`), wherever it runs; the handler runs with it as the current span.

Attribute names: :mod:`.conventions`. The guide: ``docs/observability.md``.
"""

from __future__ import annotations

from opentelemetry.trace import TracerProvider

from ..engine.observe import Observer
from .consumer import TracingObserver, creation_context
from .producer import NOT_TRACED, Producer, Sending, trace_context_of
from .tracers import Tracers, is_configured

__all__ = [
    "NOT_TRACED",
    "Producer",
    "Sending",
    "Tracers",
    "Tracing",
    "TracingObserver",
    "creation_context",
    "is_configured",
    "trace_context_of",
]


class Tracing:
    """jobledger's spans from ``provider`` (``None``: the global tracer provider)."""

    __slots__ = ("producer", "tracers")

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.tracers = Tracers(provider)
        self.producer = Producer(self.tracers)

    def observer(self, then: Observer) -> Observer:
        """An observer that adds attempt spans to ``then`` — or ``then`` itself when no tracer
        provider is configured now (a runtime made before tracing is set up stays untraced,
        and costs nothing)."""
        if self.tracers.get() is None:
            return then
        return TracingObserver(self.tracers, then)
