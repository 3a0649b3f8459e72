"""Whether an App traces, decided lazily so the core never imports OpenTelemetry.

``App(tracing=True)`` (the default) traces once the application has configured a tracer
provider: until ``opentelemetry.trace`` has been imported by someone, no provider can have been
set, so the check is one dictionary lookup and :mod:`jobledger.otel` is not imported at all.
``tracing=False`` never traces; a tracer provider traces into that provider.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from ..engine.handlers import Handler
from ..engine.observe import Observer
from ..errors import InvalidArgument

if TYPE_CHECKING:
    from ..otel import Sending, Tracing

__all__ = ["TracingGate"]

# What an untraced enqueue enters: one shared, reusable no-op.
_OFF: AbstractContextManager[None] = nullcontext(None)


class TracingGate:
    """The App's tracing setting, resolved to :class:`jobledger.otel.Tracing` when it applies."""

    __slots__ = ("_auto", "_tracing")

    def __init__(self, setting: object) -> None:
        self._tracing: Tracing | None = None
        # True: look for a configured global provider on every use until one is found.
        self._auto = setting is True
        if type(setting) is bool:
            return
        try:
            from opentelemetry.trace import TracerProvider

            from ..otel import Tracing
        except ImportError as exc:
            raise InvalidArgument(
                "tracing with a tracer provider needs opentelemetry-api: "
                "pip install 'jobledger[otel]'",
                details={"field": "tracing"},
            ) from exc
        if not isinstance(setting, TracerProvider):
            raise InvalidArgument(
                "tracing must be True, False or an OpenTelemetry TracerProvider",
                details={"field": "tracing"},
            )
        self._tracing = Tracing(setting)

    def _resolved(self) -> Tracing | None:
        tracing = self._tracing
        if tracing is None and self._auto and "opentelemetry.trace" in sys.modules:
            try:
                from ..otel import Tracing
            except ImportError:  # an OpenTelemetry API too old for jobledger.otel: stay off
                self._auto = False
                return None
            tracing = self._tracing = Tracing()
        return tracing

    def send(self, job_id: str, queue: str | None) -> AbstractContextManager[Sending | None]:
        """Around one enqueue call: yields what to store and report, or ``None`` (untraced)."""
        tracing = self._tracing or self._resolved()
        if tracing is None:
            return _OFF
        return tracing.producer.send(job_id, queue)

    def observer(self, observer: Observer) -> Observer:
        """``observer`` with attempt spans added, when a tracer provider is configured now."""
        tracing = self._tracing or self._resolved()
        if tracing is None or not isinstance(observer, Observer):
            return observer  # not an Observer: the runtime refuses it, with its own error
        return tracing.observer(observer)

    @staticmethod
    def handler(observer: Observer, handler: Handler) -> Handler:
        """``handler`` run inside its attempt's span, when ``observer`` makes such spans."""
        otel = sys.modules.get("jobledger.otel")
        if otel is None or not isinstance(observer, otel.TracingObserver):
            return handler
        traced: Handler = observer.wrap_handler(handler)
        return traced
