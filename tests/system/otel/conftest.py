"""Fixtures for the tracing tests: an SDK tracer provider recording into memory (never the
global provider, which a process can set only once), and an App on each store traced into it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobledger
from jobledger.testing import FakeClock


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


AppFactory = Callable[..., jobledger.App]


@pytest.fixture
def make_app(any_target: str, clock: FakeClock, provider: TracerProvider) -> Iterator[AppFactory]:
    made: list[jobledger.App] = []

    def factory(**options: Any) -> jobledger.App:
        options.setdefault("clock", clock)
        options.setdefault("authorize", jobledger.allow_all)
        options.setdefault("tracing", provider)
        options.setdefault("retry_policy", jobledger.FixedBackoff(timedelta(seconds=5)))
        app = jobledger.App(any_target, **options)
        made.append(app)
        return app

    yield factory
    for app in made:
        app.close()


def spans_named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name.startswith(prefix)]
