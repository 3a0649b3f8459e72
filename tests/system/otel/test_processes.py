"""Across processes: a web process enqueues under its request's span (tracing through the global
tracer provider, as an application sets it up), a worker in another process runs the attempt,
and the attempt's span continues the request's trace. And without OpenTelemetry loaded, jobledger
imports none of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from opentelemetry.trace import SpanKind

import jobledger
from jobledger.engine.drain import Drain

from .conftest import spans_named

ROOT = Path(__file__).resolve().parents[3]

ENQUEUE_UNDER_A_REQUEST = textwrap.dedent(
    """
    import json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    import jobledger
    from jobledger.testing import FakeClock

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = jobledger.App(sys.argv[1], clock=FakeClock(1_700_000_000_000))  # tracing=True
    app.create_job("report", "build", queue="reports")
    trace.set_tracer_provider(provider)  # after the App was made: still picked up
    with trace.get_tracer("web").start_as_current_span("POST /reports"):
        occurrence = app.enqueue("report", payload={"month": "2026-11"})
    app.close()
    spans = [
        {
            "name": span.name,
            "kind": span.kind.name,
            "trace_id": span.context.trace_id,
            "span_id": span.context.span_id,
            "parent": None if span.parent is None else span.parent.span_id,
        }
        for span in exporter.get_finished_spans()
    ]
    print(json.dumps({"occurrence": occurrence.id, "spans": spans}))
    """
)


def _python(code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_attempt_in_another_process_continues_the_request_trace(
    any_target, clock, provider, exporter
):
    sent = json.loads(_python(ENQUEUE_UNDER_A_REQUEST, any_target))
    by_name = {span["name"]: span for span in sent["spans"]}
    request, send = by_name["POST /reports"], by_name["send reports"]
    assert send["kind"] == "PRODUCER" and send["parent"] == request["span_id"]

    app = jobledger.App(any_target, clock=clock, authorize=jobledger.allow_all, tracing=provider)
    ran: list[str] = []

    @app.handler("build")
    def build(ctx: jobledger.JobContext) -> str:
        ran.append(ctx.occurrence.id)
        return "built"

    try:
        # A real worker: slots in threads, settlements committed by its batching thread.
        worker = app.worker(concurrency=2, planner=False, poll_interval=timedelta(milliseconds=20))
        report = Drain(worker, sleep=lambda s: clock.advance(round(s * 1000))).run(
            install_signal_handlers=False
        )
    finally:
        app.close()
    assert dict(report.statuses) == {"succeeded": 1}
    assert ran == [sent["occurrence"]]
    [process] = spans_named(exporter, "process")
    assert process.name == "process reports" and process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == request["trace_id"] == send["trace_id"]
    assert process.parent.span_id == send["span_id"]
    assert process.parent.is_remote
    assert [link.context.span_id for link in process.links] == [send["span_id"]]
    assert process.attributes["messaging.message.id"] == sent["occurrence"]
    assert process.attributes["jobledger.outcome"] == "succeeded"


def test_jobledger_imports_no_opentelemetry_unless_the_application_did(tmp_path):
    code = textwrap.dedent(
        """
        import sys
        import jobledger
        from jobledger.testing import FakeClock, run_until_idle

        app = jobledger.App(sys.argv[1], clock=FakeClock(), authorize=jobledger.allow_all)
        app.handler("k")(lambda ctx: None)
        app.create_job("j", "k")
        app.enqueue("j")
        app.enqueue_many("j", [1, 2])
        assert [r.status for r in run_until_idle(app)] == ["succeeded"] * 3
        loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry", "jobledger.otel")))
        print(",".join(loaded) or "none")
        """
    )
    assert _python(code, str(tmp_path / "plain.sqlite3")).strip() == "none"
