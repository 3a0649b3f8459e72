"""Which tracer to use, if any: an explicit tracer provider's, else the global one's once an
application configured it.

OpenTelemetry's API hands out a proxy provider until an SDK is installed with
``trace.set_tracer_provider``; spans made through it record nothing. jobledger checks for that
first and then does no tracing work at all — no span objects, no trace context to store.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Tracer, TracerProvider

from ..version import __version__
from .conventions import TRACER_NAME

__all__ = ["Tracers", "is_configured"]


def is_configured(provider: TracerProvider) -> bool:
    """Whether spans made through ``provider`` can be recorded (it is not the API's proxy, still
    waiting for an SDK, nor the no-op provider)."""
    return not isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider))


class Tracers:
    """jobledger's tracer from ``provider`` (``None``: the global provider, looked up on every
    call so one configured after the app was made is used from then on)."""

    __slots__ = ("_provider", "_seen", "_tracer")

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self._seen: TracerProvider | None = None
        self._tracer: Tracer | None = None

    def get(self) -> Tracer | None:
        """The tracer, or ``None`` when no provider that records spans is configured."""
        provider = self._provider or trace.get_tracer_provider()
        if provider is not self._seen:
            # A race here only makes two threads look the tracer up; both get the same one.
            self._tracer = (
                provider.get_tracer(TRACER_NAME, __version__) if is_configured(provider) else None
            )
            self._seen = provider
        return self._tracer
