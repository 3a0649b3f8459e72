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
    sends = {
        span.attributes["messaging.message.id"]: span for span in spans_named(exporter, "send")
    }
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


def test_the_handler_runs_inside_its_attempt_span(make_app, provider, exporter):
    app = make_app()
    tracer = provider.get_tracer("handler")

    @app.handler("sync")
    def sync(ctx: jobledger.JobContext) -> None:
        with tracer.start_as_current_span("charge card"):
            pass

    @app.handler("async")
    async def run_async(ctx: jobledger.JobContext) -> None:
        await asyncio.sleep(0)
        with tracer.start_as_current_span("call api"):
            pass

    app.create_job("s", "sync")
    app.create_job("a", "async")
    app.enqueue("s")
    app.enqueue("a")
    assert [r.status for r in run_until_idle(app)] == ["succeeded", "succeeded"]
    processes = {
        span.attributes["jobledger.job.id"]: span for span in spans_named(exporter, "process")
    }
    [charge] = spans_named(exporter, "charge card")
    [call] = spans_named(exporter, "call api")
    assert charge.parent.span_id == processes["s"].context.span_id
    assert call.parent.span_id == processes["a"].context.span_id
    # Nothing stays current in this thread once the attempts are over.
    from opentelemetry import trace

    assert not trace.get_current_span().get_span_context().is_valid


def test_a_batch_is_one_send_span_and_each_occurrence_continues_it(make_app, exporter):
    app = make_app()

    @app.handler("thumb")
    def thumb(ctx: jobledger.JobContext) -> None:
        return None

    app.create_job("thumbs", "thumb")
    made = app.enqueue_many("thumbs", [{"n": n} for n in range(3)], queue="images")
    assert len({o.trace_context["traceparent"] for o in made}) == 1
    assert len(run_until_idle(app)) == 3
    [send] = spans_named(exporter, "send")
    assert send.name == "send images"
    assert send.attributes["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in send.attributes
    assert send.attributes["jobledger.deduplicated_count"] == 0
    processes = spans_named(exporter, "process")
    assert sorted(p.attributes["messaging.message.id"] for p in processes) == sorted(
        o.id for o in made
    )
    assert {p.parent.span_id for p in processes} == {send.context.span_id}


def test_a_deduplicated_enqueue_leaves_the_first_trace_in_charge(make_app, exporter):
    app = make_app()

    @app.handler("pay")
    def pay(ctx: jobledger.JobContext) -> None:
        return None

    app.create_job("payment", "pay")
    first = app.enqueue("payment", payload={"order": 7}, key="order-7")
    again = app.enqueue("payment", payload={"order": 7}, key="order-7")
    assert again.deduplicated and again.trace_context == first.trace_context
    run_until_idle(app)
    sends = spans_named(exporter, "send")
    assert [s.attributes["jobledger.deduplicated"] for s in sends] == [False, True]
    assert sends[0].context.trace_id != sends[1].context.trace_id
    [process] = spans_named(exporter, "process")
    assert process.parent.span_id == sends[0].context.span_id


def test_a_refused_enqueue_is_an_error_span_and_stores_nothing(make_app, exporter):
    app = make_app()
    with pytest.raises(jobledger.SchedulerError) as info:
        app.enqueue("no-such-job", queue="mail")
    assert info.value.code == "SCHEDULER_NOT_FOUND"
    with pytest.raises(jobledger.SchedulerError):
        app.enqueue("no-such-job", queue="q" * 65)  # too long for a queue name
    first, second = spans_named(exporter, "send")
    assert first.name == "send mail" and second.name == "send"
    for span in (first, second):
        assert span.status.status_code is StatusCode.ERROR
        assert span.kind is SpanKind.PRODUCER
    assert first.attributes["error.type"] == "SCHEDULER_NOT_FOUND"
    assert second.attributes["error.type"] == "SCHEDULER_INVALID_ARGUMENT"
    # Neither the message (it may quote input) nor a traceback lands in the span.
    assert list(first.events) == [] and first.status.description is None
    assert app.store.list_occurrences().items == ()


def test_an_occurrence_enqueued_untraced_starts_a_trace_of_its_own(
    make_app, any_target, exporter, provider
):
    untraced = make_app(tracing=False)
    untraced.create_job("j", "k")
    with provider.get_tracer("web").start_as_current_span("caller"):
        occurrence = untraced.enqueue("j")
    assert occurrence.trace_context is None
    assert spans_named(exporter, "send") == []
    app = make_app()

    @app.handler("k")
    def k(ctx: jobledger.JobContext) -> None:
        return None

    with provider.get_tracer("test").start_as_current_span("test runner"):
        run_until_idle(app)
    [process] = spans_named(exporter, "process")
    assert process.parent is None  # a root, not a child of whatever called the runtime
    assert list(process.links) == []


def test_without_a_configured_provider_nothing_is_traced(make_app, exporter):
    # tracing=True (the default) follows the global provider, which these tests never set.
    from opentelemetry import trace

    from jobledger.otel import is_configured

    assert not is_configured(trace.get_tracer_provider())
    app = make_app(tracing=True)

    @app.handler("k")
    def k(ctx: jobledger.JobContext) -> None:
        return None

    app.create_job("j", "k")
    occurrence = app.enqueue("j")
    assert occurrence.trace_context is None
    assert app.get_occurrence(occurrence.id).trace_context is None
    run_until_idle(app)
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("bad", ["yes", 1, object()])
def test_tracing_must_be_a_boolean_or_a_tracer_provider(any_target, bad):
    with pytest.raises(jobledger.SchedulerError) as info:
        jobledger.App(any_target, tracing=bad)
    assert info.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert info.value.details == {"field": "tracing"}


def test_the_app_observer_still_hears_every_hook_when_attempts_are_traced(make_app, exporter):
    from jobledger.engine.heartbeat import ManualHeartbeat
    from jobledger.engine.observe import Observer

    heard: list[str] = []

    class Recorder(Observer):
        def claimed(self, occurrences):
            heard.append("claimed")

        def started(self, occurrence):
            heard.append("started")

        def finished(self, occurrence, result, duration_s):
            heard.append(f"finished {result.status}")

    app = make_app()
    app.handler("k")(lambda ctx: None)
    app.create_job("j", "k")
    app.enqueue("j")
    runtime = app.runtime(observer=Recorder(), heartbeat=ManualHeartbeat())
    assert type(runtime.observer).__name__ == "TracingObserver"
    assert [r.status for r in runtime.run_until_idle()] == ["succeeded"]
    assert heard == ["claimed", "started", "finished succeeded"]
    assert len(spans_named(exporter, "process")) == 1
    assert runtime.observer.in_flight() == 0
    with pytest.raises(jobledger.SchedulerError):
        app.runtime(observer=object())  # not an Observer: refused as without tracing


def test_a_timed_out_attempt_ends_its_span_from_the_watchdog(make_app, provider, exporter):
    import threading

    from jobledger.engine.heartbeat import ManualHeartbeat
    from jobledger.engine.watchdog import Watchdog

    now = [1000.0]
    watchdog = Watchdog(monotonic=lambda: now[0], thread=False)
    started, release = threading.Event(), threading.Event()
    app = make_app()
    tracer = provider.get_tracer("handler")

    @app.handler("slow", timeout=timedelta(seconds=30))
    def slow(ctx: jobledger.JobContext) -> None:
        started.set()
        release.wait(5)
        with tracer.start_as_current_span("late work"):
            pass

    app.create_job("j", "slow", max_attempts=2)
    occurrence = app.enqueue("j")
    runtime = app.runtime(heartbeat=ManualHeartbeat(), watchdog=watchdog)
    box: list = []
    thread = threading.Thread(target=lambda: box.append(runtime.run_next()), daemon=True)
    thread.start()
    assert started.wait(5)
    now[0] += 30
    assert watchdog.check() == 1  # this thread settles the attempt and ends its span
    [process] = spans_named(exporter, "process")
    assert process.attributes["jobledger.outcome"] == "retry_wait"
    assert process.attributes["error.type"] == "SCHEDULER_RUNTIME_TIMEOUT"
    assert process.status.status_code is StatusCode.ERROR
    release.set()
    thread.join(5)
    assert box[0].timed_out
    # The handler ran on past its limit, still inside its attempt's span.
    [late] = spans_named(exporter, "late work")
    assert late.parent.span_id == process.context.span_id
    assert app.get_occurrence(occurrence.id).status == "retry_wait"
