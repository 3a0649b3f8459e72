"""Where open adjudication cases show: explain, and the store's Prometheus gauge."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger.testing import run_until_idle


def _unknown(app: jobledger.App) -> jobledger.Occurrence:
    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> None:
        raise jobledger.OutcomeUnknown("the gateway timed out")

    app.ensure_job("pay", "charge")
    occurrence = app.enqueue("pay")
    run_until_idle(app)
    return occurrence


def test_explain_names_the_policy_and_the_open_cases(app):
    occurrence = _unknown(app)
    explained = app.explain("pay")
    assert explained.on_lost_lease == "adjudicate"
    assert explained.open_cases == [occurrence.id]
    text = explained.render()
    assert "lost lease: adjudicate" in text
    assert f"jobledger adjudicate show {occurrence.id}" in text
    document = explained.to_dict()
    assert document["onLostLease"] == "adjudicate"
    assert document["openAdjudicationCases"] == [occurrence.id]
    case = app.get_adjudication_case(occurrence.id)
    assert case is not None and case.evidence_digest is not None
    app.adjudicate(
        occurrence.id, decision="applied", evidence_digest=case.evidence_digest, reason="ok"
    )
    assert app.explain("pay").open_cases == []


def test_the_open_cases_gauge(app, clock):
    metrics = pytest.importorskip("jobledger.metrics")
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(metrics.StoreCollector(app.store))

    def scraped() -> float:
        for line in generate_latest(registry).decode().splitlines():
            if line.startswith("jobledger_adjudication_cases_open "):
                return float(line.split()[1])
        raise AssertionError("no jobledger_adjudication_cases_open sample")

    assert scraped() == 0
    _unknown(app)
    clock.advance(timedelta(seconds=1))
    assert scraped() == 1


def test_a_snooze_is_counted_as_snoozed_not_as_a_retry(app, clock):
    metrics = pytest.importorskip("jobledger.metrics")
    from prometheus_client import CollectorRegistry

    from jobledger.engine.heartbeat import ManualHeartbeat

    runs: list[int] = []

    @app.handler("poll")
    def poll(ctx: jobledger.JobContext) -> str:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise jobledger.Snooze(delay=timedelta(seconds=1))
        return "done"

    app.ensure_job("p", "poll", max_attempts=1)
    app.enqueue("p")
    observer = metrics.PrometheusObserver(CollectorRegistry())
    runtime = app.runtime(observer=observer, heartbeat=ManualHeartbeat())
    runtime.run_until_idle()
    clock.advance(timedelta(seconds=1))
    runtime.run_until_idle()

    def count(status: str) -> float:
        value = observer.registry.get_sample_value(
            "jobledger_settlements_total", {"kind": "poll", "status": status}
        )
        return value or 0.0

    assert (count("snoozed"), count("retry_wait"), count("succeeded")) == (1.0, 0.0, 1.0)
