"""A worker's housekeeping runs each task on its own interval of the injected monotonic clock:
``Housekeeper.run_due`` is stepped here with a fake clock, so nothing sleeps."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import jobledger
from jobledger.engine.housekeeping import Housekeeper
from jobledger.engine.observe import NO_OBSERVER
from jobledger.engine.options import WorkerOptions

from .conftest import AUTHORITY, LEASE_MS


class Ticks:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class Counting:
    """The store, counting the housekeeping calls made through it."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str):
        attribute = getattr(self._store, name)
        if name in {"touch_worker", "lease_holders", "prune"}:

            def counted(*args, **kwargs):
                self.calls[name] += 1
                return attribute(*args, **kwargs)

            return counted
        return attribute


def _housekeeper(store, ticks: Ticks, **options) -> tuple[Housekeeper, Counter[str]]:
    counts: Counter[str] = Counter()
    keeper = Housekeeper(
        store,
        owner_id="w-house",
        options=WorkerOptions(planner=False, **options),
        kinds=frozenset({"echo"}),
        observer=NO_OBSERVER,
        monotonic=ticks,
        record=lambda name, amount: counts.update({name: amount}),
        poll_timeout=lambda: 1.0,
    )
    return keeper, counts


def test_each_task_runs_on_its_own_interval_of_the_monotonic_clock(store):
    ticks = Ticks()
    counting = Counting(store)
    keeper, _ = _housekeeper(
        counting,
        ticks,
        reap_interval=timedelta(seconds=2),
        heartbeat_interval=timedelta(seconds=10),
    )
    keeper.announce()
    assert keeper.run_due() == ticks.now + 2  # everything ran once; the reap is due first
    assert counting.calls == {"lease_holders": 1, "touch_worker": 1}
    ticks.now += 1.9
    keeper.run_due()
    assert counting.calls == {"lease_holders": 1, "touch_worker": 1}  # nothing due yet
    ticks.now += 0.1
    keeper.run_due()
    assert counting.calls == {"lease_holders": 2, "touch_worker": 1}
    ticks.now += 8
    keeper.run_due()
    assert counting.calls == {"lease_holders": 3, "touch_worker": 2}
    keeper.farewell()


def test_prune_runs_only_with_a_retention(store):
    ticks = Ticks()
    counting = Counting(store)
    keeper, _ = _housekeeper(counting, ticks)
    keeper.announce()
    keeper.run_due()
    assert "prune" not in counting.calls
    keeper.farewell()
    retaining, _ = _housekeeper(counting, ticks, retention=timedelta(days=1))
    retaining.announce()
    retaining.run_due()
    assert counting.calls["prune"] == 1
    retaining.farewell()


def test_the_reaper_ends_the_leases_of_a_worker_that_is_gone(store, clock):
    """Which owners are gone is the store's liveness check (tests/store/test_liveness.py); here
    the store says so, and the housekeeper ends exactly that owner's leases."""
    store.create_job(id="j", kind="echo", authority=AUTHORITY)
    dead = store.enqueue_occurrence(job_id="j", scheduled_for=clock(), trigger_key="dead")
    alive = store.enqueue_occurrence(job_id="j", scheduled_for=clock(), trigger_key="alive")
    store.claim_occurrence(occurrence_id=dead.id, owner_id="w-dead", lease_ms=LEASE_MS)
    store.claim_occurrence(occurrence_id=alive.id, owner_id="w-alive", lease_ms=LEASE_MS)
    counting = Counting(store)
    counting.owner_gone = lambda owner_id: owner_id == "w-dead"  # type: ignore[method-assign]
    keeper, counts = _housekeeper(counting, Ticks())
    keeper.announce()
    keeper.run_due()
    assert counts["reaped"] == 1
    assert store.get_occurrence(dead.id).lease_expires_at == clock()
    assert store.get_occurrence(alive.id).lease_expires_at == clock() + LEASE_MS
    keeper.farewell()


def test_the_reaper_records_the_stop_of_a_worker_that_is_gone(store, clock):
    """Issue 32 item 10: a worker killed while it held no lease stayed listed in `stats` (no
    state, last seen long ago) forever; the reaper records its stop."""
    store.register_worker(worker_id="w-dead", hostname="h", pid=1, info={"status": "idle"})
    store.register_worker(worker_id="w-alive", hostname="h", pid=2, info={"status": "idle"})
    counting = Counting(store)
    counting.owner_gone = lambda owner_id: owner_id == "w-dead"  # type: ignore[method-assign]
    keeper, _ = _housekeeper(counting, Ticks())
    keeper.announce()
    keeper.run_due()
    assert sorted(w.worker_id for w in store.list_workers()) == ["w-alive", "w-house"]
    [dead] = [w for w in store.list_workers(stopped_since=0) if w.worker_id == "w-dead"]
    assert dead.stopped_at == clock()
    keeper.farewell()
