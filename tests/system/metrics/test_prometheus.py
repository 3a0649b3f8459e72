"""Prometheus metrics after a known workload, scraped over HTTP (``serve_metrics``, as a worker
serves them) and from the web app's ``/metrics``, checked number by number."""

from __future__ import annotations

import urllib.request
from datetime import timedelta
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import jobledger
from jobledger import Fail, Retry
from jobledger.contract import OCCURRENCE_STATUSES
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.engine.observe import notify
from jobledger.errors import InvalidArgument
from jobledger.metrics import PrometheusObserver, StoreCollector, serve_metrics
from jobledger.planning.planner import Planner
from jobledger.testing import DEFAULT_START_MS, FakeClock
from jobledger.web import WebSettings, create_app

LEASE = timedelta(seconds=5)
TOKEN = "metrics-test-token-0123456789"
OK, BAD = 5, 2


@pytest.fixture
def target(backend, tmp_path: Path, request) -> str:
    if backend == "sqlite":
        return str(tmp_path / "metrics.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, labels): value}`` from a text exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(scraped, name: str, **labels: str) -> float:
    return scraped[(name, frozenset(labels.items()))]


def run_workload(target: str, observer: PrometheusObserver):
    """5 successes, 2 dead letters, 1 retry then success, 1 lease lost and reclaimed, 1 planned
    slot 30 s late; then a queued backlog 42 s old, one held lease and three workers."""
    clock = FakeClock(DEFAULT_START_MS)
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)
    takeover: list[jobledger.Runtime] = []

    @app.handler("ok")
    def ok(ctx):
        return {"ok": True}

    @app.handler("bad")
    def bad(ctx):
        raise Fail("no")

    @app.handler("flaky")
    def flaky(ctx):
        if ctx.occurrence.attempt == 1:
            raise Retry("again", delay=timedelta(seconds=10))
        return "done"

    @app.handler("slow")
    def slow(ctx):
        if ctx.occurrence.attempt == 1:
            # While this attempt runs, its lease runs out and another runtime takes it over.
            clock.advance(LEASE + timedelta(seconds=1))
            [result] = takeover[0].run_until_idle(job_kind="slow")
            assert result.status == "succeeded"
        return "slow"

    store = app.store
    app.ensure_job("ok-job", "ok")
    app.ensure_job("bad-job", "bad", max_attempts=1)
    app.ensure_job("flaky-job", "flaky")
    app.ensure_job("slow-job", "slow")
    app.schedule("tick", "ok", every=timedelta(minutes=1))
    clock.advance(timedelta(seconds=90))  # the slot at +60 s is planned 30 s late
    report = Planner(store).tick()
    notify(
        observer, "planned", report.enqueued, len(report.skipped), store.now()
    )  # as a worker does
    assert len(report.enqueued) == 1
    for index in range(OK):
        app.enqueue("ok-job", payload={"n": index})
    for index in range(BAD):
        app.enqueue("bad-job", payload={"n": index})
    app.enqueue("flaky-job")
    app.enqueue("slow-job")

    runtime = app.runtime(lease=LEASE, heartbeat=ManualHeartbeat(), observer=observer)
    takeover.append(app.runtime(lease=LEASE, heartbeat=ManualHeartbeat(), observer=observer))
    first = runtime.run_until_idle()
    clock.advance(timedelta(seconds=10))
    second = runtime.run_until_idle()
    statuses = sorted(r.status for r in (*first, *second))
    assert statuses == sorted(
        ["succeeded"] * (OK + 1) + ["dead_letter"] * BAD + ["retry_wait", "succeeded", "aborted"]
    )

    # What the store collector reads: a backlog, a held lease, workers in every state.
    store.register_worker(worker_id="stopped-worker", hostname="h", pid=1, info={})
    store.stop_worker("stopped-worker")
    store.register_worker(worker_id="stale-worker", hostname="h", pid=2, info={})
    clock.advance(timedelta(seconds=100))
    backlog = [app.enqueue("ok-job", payload={"late": i}) for i in range(2)]
    store.claim_occurrence(occurrence_id=backlog[0].id, owner_id="metrics-worker", lease_ms=60_000)
    clock.advance(timedelta(seconds=42))
    store.register_worker(worker_id="metrics-worker", hostname="h", pid=3, info={})
    return app, clock


def check_observer_numbers(scraped) -> None:
    for kind, claims in (("ok", OK + 1), ("bad", BAD), ("flaky", 2), ("slow", 2)):
        assert value(scraped, "jobledger_claims_total", kind=kind) == claims
    assert value(scraped, "jobledger_reclaims_total", kind="slow") == 1
    assert ("jobledger_reclaims_total", frozenset({("kind", "ok")})) not in scraped
    settled = {
        ("ok", "succeeded"): OK + 1,
        ("bad", "dead_letter"): BAD,
        ("flaky", "retry_wait"): 1,
        ("flaky", "succeeded"): 1,
        ("slow", "succeeded"): 1,
        ("slow", "aborted"): 1,
    }
    for (kind, status), count in settled.items():
        assert value(scraped, "jobledger_settlements_total", kind=kind, status=status) == count
    total = sum(v for (name, _), v in scraped.items() if name == "jobledger_settlements_total")
    assert total == sum(settled.values())
    assert value(scraped, "jobledger_leases_lost_total", kind="slow") == 1
    for kind, count in (("ok", OK + 1), ("bad", BAD), ("flaky", 2), ("slow", 2)):
        assert value(scraped, "jobledger_handler_duration_seconds_count", kind=kind) == count
        assert (
            value(scraped, "jobledger_handler_duration_seconds_bucket", kind=kind, le="+Inf")
            == count
        )
    assert value(scraped, "jobledger_worker_slots_busy") == 0
    assert value(scraped, "jobledger_planner_lag_seconds_count") == 1
    assert value(scraped, "jobledger_planner_lag_seconds_sum") == 30.0
    assert value(scraped, "jobledger_planner_lag_seconds_bucket", le="10.0") == 0
    assert value(scraped, "jobledger_planner_lag_seconds_bucket", le="30.0") == 1
    assert value(scraped, "jobledger_planner_enqueued_total", kind="ok") == 1


def check_store_numbers(scraped) -> None:
    # "ok" has live work and "bad" dead letters: series of their own. Every occurrence of
    # "flaky" and "slow" succeeded: nothing to watch, so they are summed into "other".
    expected = {
        ("ok", "succeeded"): OK + 1,
        ("ok", "queued"): 1,
        ("ok", "running"): 1,
        ("bad", "dead_letter"): BAD,
        ("other", "succeeded"): 2,
    }
    for kind in ("ok", "bad", "other"):
        for status in OCCURRENCE_STATUSES:
            count = expected.get((kind, status), 0)
            assert value(scraped, "jobledger_occurrences", kind=kind, status=status) == count
    per_kind = {dict(labels)["kind"] for name, labels in scraped if name == "jobledger_occurrences"}
    assert per_kind == {"ok", "bad", "other"}
    assert value(scraped, "jobledger_store_kinds", state="shown") == 2
    assert value(scraped, "jobledger_store_kinds", state="folded") == 2
    assert value(scraped, "jobledger_oldest_due_age_seconds", kind="ok") == 42.0
    assert value(scraped, "jobledger_oldest_due_age_seconds", kind="bad") == 0.0
    assert value(scraped, "jobledger_oldest_due_age_seconds", kind="other") == 0.0
    assert value(scraped, "jobledger_leases_held", owner="metrics-worker") == 1
    assert [name for name, labels in scraped if name == "jobledger_leases_held"] == [
        "jobledger_leases_held"
    ]
    assert value(scraped, "jobledger_workers", state="active") == 1
    assert value(scraped, "jobledger_workers", state="stale") == 1
    assert value(scraped, "jobledger_store_up") == 1
    [build] = [labels for name, labels in scraped if name == "jobledger_build_info"]
    assert dict(build)["schema_version"].isdigit()
    assert value(scraped, "jobledger_adjudication_cases_open") == 0


def test_metrics_after_a_known_workload_over_http_and_the_web_app(target):
    observer = PrometheusObserver(CollectorRegistry())
    app, _clock = run_workload(target, observer)
    with app:
        with serve_metrics(app.store, port=0, observer=observer) as server:
            assert server.url == f"http://127.0.0.1:{server.port}/metrics"
            with urllib.request.urlopen(server.url, timeout=10) as response:  # noqa: S310
                assert response.headers["Content-Type"].startswith("text/plain")
                over_http = samples(response.read().decode())
        check_observer_numbers(over_http)
        check_store_numbers(over_http)

        web = create_app(app.store, WebSettings(token=TOKEN), metrics_registry=observer.registry)
        with TestClient(web) as client:
            assert client.get("/metrics").status_code == 401
            answer = client.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
            assert answer.status_code == 200
            from_web = samples(answer.text)
        check_observer_numbers(from_web)
        check_store_numbers(from_web)
        volatile = ("jobledger_handler_duration_seconds", "_created")
        assert {k: v for k, v in from_web.items() if not any(p in k[0] for p in volatile)} == {
            k: v for k, v in over_http.items() if not any(p in k[0] for p in volatile)
        }


def test_a_real_worker_counts_batched_claims_and_frees_its_slots(tmp_path):
    import threading

    observer = PrometheusObserver()
    app = jobledger.App(tmp_path / "w.sqlite3", authorize=jobledger.allow_all)
    done = threading.Event()
    seen: list[int] = []

    @app.handler("ok")
    def ok(ctx):
        seen.append(1)
        if len(seen) == 20:
            done.set()

    with app:
        app.ensure_job("ok-job", "ok")
        for index in range(20):
            app.enqueue("ok-job", payload={"n": index})
        worker = app.worker(concurrency=3, planner=False, observer=observer)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        assert done.wait(30)
        settled = {"kind": "ok", "status": "succeeded"}
        for _ in range(600):  # the last settlement commits just after its handler returns
            if observer.registry.get_sample_value("jobledger_settlements_total", settled) == 20:
                break
            threading.Event().wait(0.05)
        worker.stop()
        thread.join(30)
    scraped = samples(prometheus_client.generate_latest(observer.registry).decode())
    assert value(scraped, "jobledger_claims_total", kind="ok") == 20
    assert value(scraped, "jobledger_settlements_total", kind="ok", status="succeeded") == 20
    assert value(scraped, "jobledger_worker_slots_busy") == 0


def test_observers_keep_their_own_registries():
    first, second = PrometheusObserver(), PrometheusObserver()  # no duplicate-name clash
    assert first.registry is not second.registry
    shared = CollectorRegistry()
    PrometheusObserver(shared)
    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusObserver(shared)


def test_an_unreadable_store_reports_store_up_zero(tmp_path):
    store = jobledger.open_store(tmp_path / "gone.sqlite3")
    registry = CollectorRegistry()
    registry.register(StoreCollector(store))
    store.close()
    scraped = samples(prometheus_client.generate_latest(registry).decode())
    assert scraped == {("jobledger_store_up", frozenset()): 0.0}


def test_serve_metrics_checks_its_arguments(tmp_path):
    with pytest.raises(InvalidArgument):
        serve_metrics(None, port=-1)
    with pytest.raises(InvalidArgument):
        serve_metrics(None, host=" ", port=0)
    with pytest.raises(InvalidArgument):
        serve_metrics(None, port=0, observer=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        StoreCollector(object())  # type: ignore[arg-type]
    observer = PrometheusObserver()
    observer.claimed([])
    with serve_metrics(None, port=0, observer=observer) as server:  # observer only, no store
        with urllib.request.urlopen(server.url, timeout=10) as response:  # noqa: S310
            text = response.read().decode()
    assert "jobledger_worker_slots_busy 0.0" in text
    assert "jobledger_occurrences" not in text
    server.close()  # idempotent


# -- bounded per-kind series ----------------------------------------------------------------------

AUTHORITY = {"principal": {"type": "user", "id": "metrics"}}


def store_scrape(store, **options) -> tuple[str, dict]:
    registry = CollectorRegistry()
    registry.register(StoreCollector(store, **options))
    text = prometheus_client.generate_latest(registry).decode()
    return text, samples(text)


def many_kinds(store, clock: FakeClock, kinds: int) -> None:
    """``kinds`` kinds, one job each: every kind 2 successes, the first 30 one dead letter too,
    and kind i then has i % 7 queued occurrences (so 6 in 7 kinds have live work, in different
    amounts)."""

    def enqueue(counts: dict[int, int], prefix: str) -> None:
        requests = [
            jobledger.EnqueueRequest(
                job_id=f"job-{i:04}", scheduled_for=store.now(), trigger_key=f"{prefix}{n}"
            )
            for i, count in counts.items()
            for n in range(count)
        ]
        for start in range(0, len(requests), 5_000):
            store.enqueue_batch(requests[start : start + 5_000])

    for index in range(kinds):
        store.create_job(
            id=f"job-{index:04}", kind=f"kind-{index:04}", authority=AUTHORITY, max_attempts=1
        )
    enqueue({i: 3 if i < 30 else 2 for i in range(kinds)}, "settled-")
    settled: dict[str, int] = {}
    while claimed := store.claim_batch(owner_id="w", lease_ms=60_000, limit=1000):
        settlements = []
        for occurrence in claimed:
            n = settled[occurrence.job_id] = settled.get(occurrence.job_id, 0) + 1
            settlements.append(
                jobledger.Settlement(
                    occurrence_id=occurrence.id,
                    owner_id="w",
                    fence=occurrence.fence,
                    outcome="failed" if n == 3 else "succeeded",
                    retryable=False,
                )
            )
        store.settle_batch(settlements)
    enqueue({i: i % 7 for i in range(kinds)}, "queued-")
    clock.advance(timedelta(seconds=30))


def test_two_thousand_kinds_export_a_bounded_scrape(target):
    clock = FakeClock(DEFAULT_START_MS)
    with jobledger.open_store(target, clock=clock) as store:
        many_kinds(store, clock, 2_000)
        counts = store.count_occurrences()
        assert {row.status for row in counts} == {"queued", "succeeded", "dead_letter"}
        text, scraped = store_scrape(store)
    series = len(scraped)
    kinds = {dict(labels)["kind"] for name, labels in scraped if name == "jobledger_occurrences"}
    # 100 kinds + "other", every status and one oldest-due age each, plus a handful of others.
    assert len(kinds) == 101 and "other" in kinds
    assert series <= 101 * (len(OCCURRENCE_STATUSES) + 1) + 20, series
    assert len(text.encode()) < 80_000, len(text.encode())
    # The 100 shown are the ones with the most live work (6 queued: kinds i with i % 7 == 6).
    shown = kinds - {"other"}
    assert all(int(kind.split("-")[1]) % 7 == 6 for kind in shown)
    assert value(scraped, "jobledger_store_kinds", state="shown") == 100
    assert value(scraped, "jobledger_store_kinds", state="folded") == 1_900
    # Totals by status stay exact: "other" holds everything not shown.
    for status in ("queued", "succeeded", "dead_letter"):
        exported = sum(
            v
            for (name, labels), v in scraped.items()
            if name == "jobledger_occurrences" and dict(labels)["status"] == status
        )
        assert exported == sum(row.count for row in counts if row.status == status), status
    assert value(scraped, "jobledger_oldest_due_age_seconds", kind="other") == 30.0


def test_kinds_with_nothing_live_disappear_from_the_per_kind_gauges(target):
    clock = FakeClock(DEFAULT_START_MS)
    app = jobledger.App(target, clock=clock, authorize=jobledger.allow_all)

    @app.handler("mail")
    def mail(ctx):
        return None

    @app.handler("broken")
    def broken(ctx):
        raise Fail("no")

    with app:
        app.ensure_job("mail-job", "mail")
        app.ensure_job("broken-job", "broken", max_attempts=1)
        app.enqueue("mail-job")
        app.enqueue("broken-job")
        _, before = store_scrape(app.store)
        assert value(before, "jobledger_occurrences", kind="mail", status="queued") == 1
        assert (
            "jobledger_occurrences",
            frozenset({("kind", "other"), ("status", "queued")}),
        ) not in before
        app.runtime(heartbeat=ManualHeartbeat()).run_until_idle()
        _, after = store_scrape(app.store)
    kinds = {dict(labels)["kind"] for name, labels in after if name.startswith("jobledger_o")}
    assert kinds == {"broken", "other"}  # mail's only occurrence succeeded: summed into other
    assert value(after, "jobledger_occurrences", kind="other", status="succeeded") == 1
    assert value(after, "jobledger_occurrences", kind="broken", status="dead_letter") == 1


def test_the_kind_cap_is_a_setting(tmp_path):
    with jobledger.open_store(tmp_path / "cap.sqlite3", clock=FakeClock()) as store:
        for index in range(5):
            store.create_job(id=f"j{index}", kind=f"k{index}", authority=AUTHORITY)
            for n in range(index + 1):
                store.enqueue_occurrence(job_id=f"j{index}", scheduled_for=0, trigger_key=f"{n}")
        store.create_job(id="o", kind="other", authority=AUTHORITY)  # a real kind called "other"
        store.enqueue_occurrence(job_id="o", scheduled_for=0, trigger_key="t")
        _, scraped = store_scrape(store, max_kinds=2)
        for bad in (0, -1, 10_001, 2.0, True, None):
            with pytest.raises(InvalidArgument):
                StoreCollector(store, max_kinds=bad)
    queued = {
        dict(labels)["kind"]: v
        for (name, labels), v in scraped.items()
        if name == "jobledger_occurrences" and dict(labels)["status"] == "queued"
    }
    assert queued == {"k4": 5, "k3": 4, "other": 1 + 2 + 3 + 1}
