"""Per-queue gauges of the store collector (SPEC §7): depth, running, paused, held back by limit,
declared limits — bounded like the per-kind series."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger import Queue, Rate
from jobledger.errors import InvalidArgument
from jobledger.metrics import StoreCollector
from jobledger.testing import DEFAULT_START_MS, FakeClock
from tests.system.metrics.test_prometheus import AUTHORITY, store_scrape, value

MINUTE = 60_000


@pytest.fixture
def target(backend, tmp_path, request):
    if backend == "sqlite":
        return str(tmp_path / "queues.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


def _enqueue(store, job_id, count, **options):
    for index in range(count):
        store.enqueue_occurrence(
            job_id=job_id,
            scheduled_for=store.now(),
            trigger_key=f"{job_id}-{options.get('queue')}-{index}",
            **options,
        )


def test_queue_gauges_after_a_known_workload(target):
    clock = FakeClock(DEFAULT_START_MS - DEFAULT_START_MS % MINUTE)
    with jobledger.open_store(target, clock=clock) as store:
        for queue in ("mail", "reports", "slow", "busy"):
            store.create_job(id=queue, kind=queue, authority=AUTHORITY, queue=queue)
        store.declare_queue(Queue("reports", partition_concurrency=1), actor="ops")
        store.declare_queue(Queue("slow", rate=Rate(1, timedelta(minutes=1))), actor="ops")
        store.declare_queue(Queue("busy", concurrency=1, worker_concurrency=3), actor="ops")
        _enqueue(store, "mail", 4)
        _enqueue(store, "reports", 3, partition="c:1")
        _enqueue(store, "slow", 3)
        _enqueue(store, "busy", 2)
        store.enqueue_occurrence(
            job_id="mail", scheduled_for=store.now(), trigger_key="later",
            available_at=store.now() + MINUTE,
        )  # fmt: skip
        for kind in ("reports", "slow", "busy"):
            assert store.claim_next(owner_id="w", lease_ms=MINUTE, kinds=[kind]) is not None
        store.pause_queue("mail", reason="incident", actor="ops")
        _, scraped = store_scrape(store)
    assert value(scraped, "jobledger_queue_depth", queue="mail", state="ready") == 4
    assert value(scraped, "jobledger_queue_depth", queue="mail", state="waiting") == 1
    assert value(scraped, "jobledger_queue_depth", queue="reports", state="held") == 2
    assert value(scraped, "jobledger_queue_running", queue="reports") == 1
    assert value(scraped, "jobledger_queue_paused", queue="mail") == 1
    assert value(scraped, "jobledger_queue_paused", queue="busy") == 0
    held = {
        (dict(labels)["queue"], dict(labels)["reason"]): v
        for (name, labels), v in scraped.items()
        if name == "jobledger_queue_held_back" and v
    }
    assert held == {
        ("mail", "paused"): 5,
        ("reports", "partition"): 2,
        ("slow", "rate"): 2,
        ("busy", "concurrency"): 1,
    }
    assert value(scraped, "jobledger_queue_limit", queue="busy", limit="concurrency") == 1
    assert value(scraped, "jobledger_queue_limit", queue="busy", limit="worker_concurrency") == 3
    assert value(scraped, "jobledger_queue_limit", queue="slow", limit="rate") == 1
    assert value(scraped, "jobledger_store_queues", state="shown") == 4


def test_queue_series_are_bounded(tmp_path):
    with jobledger.open_store(tmp_path / "many.sqlite3", clock=FakeClock()) as store:
        store.create_job(id="j", kind="k", authority=AUTHORITY)
        for index in range(30):
            _enqueue(store, "j", index % 4, queue=f"q{index:02d}")
        store.pause_queue("q00", reason="r", actor="ops")  # empty, but paused: shown first
        _, scraped = store_scrape(store, max_queues=5)
        for bad in (0, 10_001, True):
            with pytest.raises(InvalidArgument):
                StoreCollector(store, max_queues=bad)
        for bad in (0, 1_000_001, 1.5):
            with pytest.raises(InvalidArgument):
                StoreCollector(store, depth_cap=bad)
        _, capped = store_scrape(store, depth_cap=2)
    assert value(capped, "jobledger_queue_depth", queue="q03", state="ready") == 2  # of 3
    queues = {
        dict(labels)["queue"] for name, labels in scraped if name == "jobledger_queue_running"
    }
    assert len(queues) == 6 and {"other", "q00"} <= queues
    ready = sum(
        v
        for (name, labels), v in scraped.items()
        if name == "jobledger_queue_depth" and dict(labels)["state"] == "ready"
    )
    assert ready == sum(index % 4 for index in range(30))  # totals stay exact
    # Queues with work (index % 4 != 0: 22 of them) and the paused q00; five shown.
    assert value(scraped, "jobledger_store_queues", state="folded") == 23 - 5
