"""One heartbeat per runtime: the LeaseKeeper renews every held lease in one transaction."""

from __future__ import annotations

import threading
from typing import Any

import jobledger
from jobledger.engine.heartbeat import ManualHeartbeat
from jobledger.engine.keeper import LeaseKeeper

from .conftest import AUTHORITY, LEASE_MS, event_types


class Holder:
    def __init__(self, occurrence: jobledger.Occurrence) -> None:
        self.occurrence = occurrence
        self.renewed: list[jobledger.Occurrence] = []
        self.lost: list[jobledger.LeaseLost] = []

    @property
    def lease(self) -> jobledger.Occurrence:
        return self.occurrence

    def lease_renewed(self, occurrence: jobledger.Occurrence) -> None:
        self.renewed.append(occurrence)
        self.occurrence = occurrence

    def lease_lost(self, error: jobledger.LeaseLost) -> None:
        self.lost.append(error)


class Recording:
    """The real store, with renew_batch calls recorded (and optionally failing)."""

    def __init__(self, store: jobledger.Store) -> None:
        self._store = store
        self.batches: list[list[str]] = []
        self.fail = False

    def renew_batch(self, renewals: list[jobledger.Renewal]) -> Any:
        self.batches.append([r.occurrence_id for r in renewals])
        if self.fail:
            raise jobledger.StorageUnavailable("database restarting")
        return self._store.renew_batch(renewals)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _claimed(store: jobledger.Store, clock: Any, count: int) -> list[jobledger.Occurrence]:
    store.create_job(id="job-k", kind="echo", authority=AUTHORITY)
    for index in range(count):
        store.enqueue_occurrence(job_id="job-k", scheduled_for=clock(), trigger_key=f"t{index}")
    return store.claim_batch(owner_id="me", lease_ms=LEASE_MS, limit=count)


def _keeper(store: Any, driver: ManualHeartbeat) -> LeaseKeeper:
    return LeaseKeeper(store, owner_id="me", lease_ms=LEASE_MS, interval_ms=3_000, driver=driver)


def test_one_beat_renews_every_held_lease_in_one_transaction(store, clock):
    claimed = _claimed(store, clock, 5)
    recording, driver = Recording(store), ManualHeartbeat()
    keeper = _keeper(recording, driver)
    holders = [Holder(occurrence) for occurrence in claimed]
    for holder in holders:
        keeper.track(holder)
    assert (driver.started, driver.active, driver.intervals) == (1, 1, [3_000])
    clock.advance(3_000)
    assert driver.tick() == 1
    assert recording.batches == [[o.id for o in claimed]]
    for holder in holders:
        [renewed] = holder.renewed
        assert renewed.lease_expires_at == clock() + LEASE_MS
        assert holder.lost == []
    assert all(event_types(store, o.id).count("occurrence_renewed") == 1 for o in claimed)
    keeper.close()


def test_the_heartbeat_runs_only_while_something_is_held(store, clock):
    [first, second] = _claimed(store, clock, 2)
    driver = ManualHeartbeat()
    keeper = _keeper(store, driver)
    assert driver.active == 0
    a, b = Holder(first), Holder(second)
    keeper.track(a)
    keeper.track(b)
    assert (driver.started, driver.active) == (1, 1)  # one heartbeat, not one per lease
    keeper.untrack(a)
    assert driver.active == 1
    keeper.untrack(b)
    assert (driver.active, driver.stopped) == (0, 1)
    keeper.hold_open()  # a worker keeps it beating while it runs, even with nothing held
    assert driver.active == 1
    keeper.release_hold()
    assert driver.active == 0


def test_a_lost_lease_is_reported_to_its_holder_only_and_no_longer_renewed(store, clock):
    [mine, taken] = _claimed(store, clock, 2)
    recording, driver = Recording(store), ManualHeartbeat()
    keeper = _keeper(recording, driver)
    kept, lost = Holder(mine), Holder(taken)
    keeper.track(kept)
    keeper.track(lost)
    store.cancel_occurrence(occurrence_id=taken.id, actor="ops", reason="no longer wanted")
    driver.tick()
    assert len(kept.renewed) == 1 and kept.lost == []
    assert lost.renewed == [] and len(lost.lost) == 1
    assert keeper.tracked == 1
    driver.tick()
    assert recording.batches == [[mine.id, taken.id], [mine.id]]
    keeper.close()


def test_a_storage_failure_skips_a_beat_and_the_next_one_renews(store, clock, caplog):
    claimed = _claimed(store, clock, 2)
    recording, driver = Recording(store), ManualHeartbeat()
    keeper = _keeper(recording, driver)
    holders = [Holder(o) for o in claimed]
    for holder in holders:
        keeper.track(holder)
    recording.fail = True
    with caplog.at_level("WARNING", logger="jobledger.runtime"):
        driver.tick()
    assert "renewing 2 lease(s) failed" in caplog.text
    assert all(h.renewed == [] and h.lost == [] for h in holders)
    recording.fail = False
    driver.tick()
    assert all(len(h.renewed) == 1 for h in holders)
    keeper.close()


def test_a_failing_callback_does_not_stop_the_others(store, clock):
    claimed = _claimed(store, clock, 2)
    driver = ManualHeartbeat()
    keeper = _keeper(store, driver)

    class Broken(Holder):
        def lease_renewed(self, occurrence: jobledger.Occurrence) -> None:
            raise RuntimeError("callback bug")

    broken, fine = Broken(claimed[0]), Holder(claimed[1])
    keeper.track(broken)
    keeper.track(fine)
    driver.tick()
    assert len(fine.renewed) == 1
    keeper.close()
    assert driver.active == 0


def test_many_leases_are_renewed_a_thousand_per_transaction(clock):
    class FakeStore:
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def renew_batch(self, renewals: list[jobledger.Renewal]) -> list[Any]:
            self.sizes.append(len(renewals))
            return [jobledger.LeaseLost("gone") for _ in renewals]

    fake, driver = FakeStore(), ManualHeartbeat()
    keeper = _keeper(fake, driver)
    for index in range(2_500):
        keeper.track(Holder(_occurrence(f"occ_{index}")))
    driver.tick()
    assert fake.sizes == [1_000, 1_000, 500]
    assert keeper.tracked == 0


def _occurrence(occurrence_id: str) -> jobledger.Occurrence:
    return jobledger.Occurrence(
        id=occurrence_id,
        job_id="j",
        job_revision=1,
        idempotency_key="k",
        trigger_key="t",
        scheduled_for=0,
        available_at=0,
        status="running",
        attempt=1,
        max_attempts=3,
        fence=1,
        lease_owner="me",
        lease_expires_at=LEASE_MS,
        authority={},
        payload=None,
        last_error=None,
        result=None,
        created_at=0,
        updated_at=0,
        settled_at=None,
    )


def test_a_runtimes_concurrent_attempts_share_one_heartbeat(store, clock, make_runtime, driver):
    """Three handlers running at once: one heartbeat, one renew transaction per beat."""
    store.create_job(id="job-c", kind="echo", authority=AUTHORITY)
    for index in range(3):
        store.enqueue_occurrence(job_id="job-c", scheduled_for=clock(), trigger_key=f"t{index}")
    barrier = threading.Barrier(4, timeout=5)
    release = threading.Event()

    def handler(ctx: jobledger.JobContext) -> str:
        barrier.wait()
        release.wait(5)
        return "ok"

    runtime = make_runtime({"echo": handler})
    threads = [threading.Thread(target=runtime.run_next, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    barrier.wait()  # all three handlers are running
    assert (driver.started, driver.active) == (1, 1)
    assert runtime.keeper.tracked == 3
    before = len(store.events(event_type="occurrence_renewed", limit=100))
    clock.advance(3_000)
    driver.tick()
    renewed = store.events(event_type="occurrence_renewed", limit=100)
    assert len(renewed) - before == 3
    release.set()
    for thread in threads:
        thread.join(5)
    assert driver.active == 0
    assert runtime.keeper.tracked == 0
