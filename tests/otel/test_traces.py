"""A request's trace shows the job it caused: the enqueue is a ``send <queue>`` span (PRODUCER)
under the caller's span, each attempt a ``process <queue>`` span (CONSUMER) that is its child
and links to it, with the messaging conventions' attributes — on both stores."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from opentelemetry.trace import SpanKind, StatusCode

import jobledger
from jobledger.testing import run_until_idle

from .conftest import spans_named

AUTHORITY = {"principal": {"type": "user", "id": "tester"}}


def _ids(span):
    context = span.get_span_context()
    return context.trace_id, context.span_id


def test_a_request_trace_shows_the_enqueue_and_the_attempt(make_app, provider, exporter):
    app = make_app()

    @app.handler("email")
    def email(ctx: jobledger.JobContext) -> str:
        return "sent"

    app.create_job("welcome", "email", queue="mail", max_attempts=4)
    with provider.get_tracer("web").start_as_current_span("POST /signup") as request:
        occurrence = app.enqueue("welcome", payload={"to": "ada"})
    request_trace, request_span = _ids(request)
    assert occurrence.trace_context is not None
    assert occurrence.trace_context["traceparent"].split("-")[1] == f"{request_trace:032x}"

    [result] = run_until_idle(app)
    assert result.status == "succeeded"

    [send] = spans_named(exporter, "send")
    [process] = spans_named(exporter, "process")
    assert send.name == "send mail" and process.name == "process mail"
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    # One trace: request → send → process; the attempt also links to its creation context.
    assert send.parent.span_id == request_span
    assert process.parent.span_id == send.context.span_id
    assert {send.context.trace_id, process.context.trace_id} == {request_trace}
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert dict(send.attributes) == {
        "messaging.system": "jobledger",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "mail",
        "messaging.message.id": occurrence.id,
        "jobledger.job.id": "welcome",
        "jobledger.job.kind": "email",
        "jobledger.deduplicated": False,
    }
    assert dict(process.attributes) == {
        "messaging.system": "jobledger",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "mail",
        "messaging.message.id": occurrence.id,
        "jobledger.job.id": "welcome",
        "jobledger.job.kind": "email",
        "jobledger.attempt": 1,
        "jobledger.max_attempts": 4,
        "jobledger.fence": 1,
        "jobledger.priority": 0,
        "jobledger.reclaimed": False,
        "jobledger.outcome": "succeeded",
    }
    assert process.status.status_code is StatusCode.UNSET
    # The stored context is the send span's, read back by the claim.
    stored = app.get_occurrence(occurrence.id).trace_context
    version, trace_id, span_id, flags = stored["traceparent"].split("-")
    assert (trace_id, span_id) == (f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}")
    assert int(flags, 16) & 1 == 1  # sampled


def test_each_attempt_is_a_span_with_its_outcome(make_app, exporter, clock):
    app = make_app()

    @app.handler("flaky")
    def flaky(ctx: jobledger.JobContext) -> str:
        if ctx.occurrence.attempt < 3:
            raise RuntimeError("upstream said no")
        return "ok"

    app.create_job("sync", "flaky", max_attempts=3)
    app.create_job("doomed", "flaky", max_attempts=1)
    start = clock()
    occurrence = app.enqueue("sync")
    doomed = app.enqueue("doomed")
    results = list(run_until_idle(app))
    clock.advance(5_000)
    results += run_until_idle(app)
    clock.advance(5_000)
    results += run_until_idle(app)
    assert sorted(r.status for r in results) == [
        "dead_letter",
        "retry_wait",
        "retry_wait",
        "succeeded",
    ]
    sends = {span.attributes["messaging.message.id"]: span for span in spans_named(exporter, "send")}
    processes = spans_named(exporter, "process")
    mine = sorted(
        (p for p in processes if p.attributes["messaging.message.id"] == occurrence.id),
        key=lambda p: p.attributes["jobledger.attempt"],
    )
    assert [p.attributes["jobledger.outcome"] for p in mine] == [
        "retry_wait",
        "retry_wait",
        "succeeded",
    ]
    # Every attempt, however much later, is a child of the same enqueue.
    assert {p.parent.span_id for p in mine} == {sends[occurrence.id].context.span_id}
    first, second, third = mine
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "upstream said no"
    assert first.attributes["error.type"] == "execution_failed"
    assert first.attributes["jobledger.retry_at_ms"] == start + 5_000
    assert second.attributes["jobledger.retry_at_ms"] == start + 10_000
    assert third.status.status_code is StatusCode.UNSET and "error.type" not in third.attributes
    [dead] = [p for p in processes if p.attributes["messaging.message.id"] == doomed.id]
    assert dead.attributes["jobledger.outcome"] == "dead_letter"
    assert dead.status.status_code is StatusCode.ERROR
    assert dead.attributes["error.type"] == "execution_failed"
    assert "jobledger.retry_at_ms" not in dead.attributes
    assert second.attributes["jobledger.fence"] == 2
