"""A forward clock step and a live lease holder (issue 17, item 10).

Two hours forward expires every lease at once. On SQLite an owner whose liveness lock (the
``flock`` every worker holds for its life) is held is certainly alive: no claim takes over or
dead-letters its expired leases, and it may still renew, settle or release them — unless
something ended the lease (the reaper, an operator). An owner without a lock file (a script
calling the store) is not known to be alive: its leases expire as before
(``test_clock_steps.py``). On PostgreSQL leases are judged on the database server's clock: a
step of a worker machine's clock changes nothing, and a step of the server's clock (the injected
clock stands for it here) expires them for everyone, as documented in ``docs/guarantees.md``.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

import jobledger

from .test_clock_steps import HOUR_MS, LEASE_MS, SteppingClock, _claim, _job


@pytest.fixture
def wall() -> SteppingClock:
    return SteppingClock()


@pytest.fixture
def stepped(any_target: str, wall: SteppingClock):
    with jobledger.open_store(any_target, clock=wall) as opened:
        yield opened


def _held_across_a_step(store: jobledger.Store, wall: SteppingClock):
    """w1 (holding its liveness lock) claims two retryable occurrences and a final attempt;
    then the clock steps two hours forward."""
    _job(store, "job")
    _job(store, "last", max_attempts=1)
    for key in ("a", "b"):
        store.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key=key)
    store.enqueue_occurrence(job_id="last", scheduled_for=wall(), trigger_key="z")
    lock = store.hold_owner_lock("w1")
    held = store.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=10, kinds={"echo"})
    assert len(held) == 3
    wall.step(2 * HOUR_MS)
    return lock, held


def _renewals(held: list[jobledger.Occurrence]) -> list[jobledger.Renewal]:
    return [
        jobledger.Renewal(occurrence_id=o.id, owner_id="w1", fence=o.fence, lease_ms=LEASE_MS)
        for o in held
    ]


def test_a_step_forward_leaves_a_live_owners_leases_to_it(stepped, wall, backend):
    lock, held = _held_across_a_step(stepped, wall)
    taken = stepped.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=10, kinds={"echo"})
    if backend == "postgres":
        # The database clock stepped: every lease expired for everyone (the lock is not asked).
        assert len(taken) == 2 and all(o.reclaimed for o in taken)
        lock.close()
        return
    # SQLite: w1's lock is held, so nobody takes its leases or dead-letters its final attempt…
    assert taken == []
    assert {stepped.get_occurrence(o.id).status for o in held} == {"running"}
    for occurrence in held:  # a targeted claim leaves them too
        assert (
            stepped.claim_occurrence(occurrence_id=occurrence.id, owner_id="w2", lease_ms=LEASE_MS)
            is None
        )
    # …and w1 keeps them: its renewals lease from the new now, its results commit.
    renewed = stepped.renew_batch(_renewals(held))
    assert all(isinstance(r, jobledger.Occurrence) for r in renewed)
    assert {r.lease_expires_at for r in renewed} == {wall() + LEASE_MS}
    for occurrence in held:
        done = stepped.settle(
            occurrence_id=occurrence.id,
            owner_id="w1",
            fence=occurrence.fence,
            outcome="succeeded",
        )
        assert done.status == "succeeded"
    lock.close()


def test_a_live_owner_may_settle_or_release_a_lease_expired_by_a_step(stepped, wall, backend):
    if backend == "postgres":
        pytest.skip("PostgreSQL judges leases on the database clock, whoever holds them")
    lock, held = _held_across_a_step(stepped, wall)
    released = stepped.release_lease(
        occurrence_id=held[0].id, owner_id="w1", fence=held[0].fence, reason="shutdown"
    )
    assert released.status == "retry_wait"
    failed = stepped.settle(
        occurrence_id=held[1].id,
        owner_id="w1",
        fence=held[1].fence,
        outcome="failed",
        error={"code": "boom", "message": "retry me"},
    )
    assert failed.status == "retry_wait"
    # A fenced-out or foreign writer is still refused: only the holder's own lease is kept.
    with pytest.raises(jobledger.LeaseLost):
        stepped.renew(occurrence_id=held[2].id, owner_id="w2", fence=held[2].fence, lease_ms=1)
    with pytest.raises(jobledger.LeaseLost):
        stepped.renew(occurrence_id=held[2].id, owner_id="w1", fence=held[2].fence + 1, lease_ms=1)
    lock.close()


def test_once_the_owner_is_gone_its_expired_leases_are_taken_over(stepped, wall, backend):
    if backend == "postgres":
        pytest.skip("PostgreSQL judges leases on the database clock, whoever holds them")
    lock, held = _held_across_a_step(stepped, wall)
    assert _claim(stepped, "w2") is None
    lock.close()  # the worker stopped (or died: the kernel drops the lock the same way)
    taken = stepped.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=10, kinds={"echo"})
    assert len(taken) == 2 and all(o.reclaimed for o in taken)
    final = next(o for o in held if o.job_id == "last")
    dead = stepped.get_occurrence(final.id)
    assert (dead.status, dead.last_error["code"]) == ("dead_letter", "lease_expired")
    with pytest.raises(jobledger.LeaseLost):
        stepped.renew(occurrence_id=held[0].id, owner_id="w1", fence=held[0].fence, lease_ms=1)


def test_a_lease_something_ended_is_taken_over_though_its_owner_lives(stepped, wall):
    """The reaper's (or an operator's) end of a lease is final: a live lock does not revive
    it, and the next claim takes it over."""
    _job(stepped, "job")
    stepped.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key="t")
    lock = stepped.hold_owner_lock("w1")
    claimed = _claim(stepped, "w1")
    assert claimed is not None
    [ended] = stepped.expire_leases_of("w1", reason="operator")
    assert ended.lease_expires_at == ended.updated_at
    wall.step(2 * HOUR_MS)
    with pytest.raises(jobledger.LeaseLost):
        stepped.renew(occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, lease_ms=1)
    taken = _claim(stepped, "w2")
    assert taken is not None and taken.id == claimed.id and taken.reclaimed
    lock.close()


def test_an_owner_without_a_lock_file_is_not_known_alive(stepped, wall, backend):
    """A script calling the store holds no lock: its leases expire with the step, as before."""
    _job(stepped, "job")
    stepped.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key="t")
    claimed = _claim(stepped, "script")
    assert claimed is not None
    wall.step(2 * HOUR_MS)
    taken = _claim(stepped, "w2")
    assert taken is not None and taken.id == claimed.id and taken.reclaimed


@pytest.mark.postgres
def test_a_step_of_a_worker_machines_clock_changes_nothing_on_postgresql(
    postgres_database_url, monkeypatch
):
    """No injected clock: the store reads the database server's clock. The process's wall
    clock jumping two hours forward expires nothing."""
    with jobledger.open_store(postgres_database_url) as store:
        _job(store, "job")
        store.enqueue_occurrence(job_id="job", scheduled_for=store.now(), trigger_key="t")
        claimed = store.claim_next(owner_id="w1", lease_ms=LEASE_MS, kinds={"echo"})
        assert claimed is not None
        # The process's real-time clock itself is what steps here, so it is patched directly.
        real_time, real_time_ns = time.time, time.time_ns  # noqa: TID251
        monkeypatch.setattr(time, "time", lambda: real_time() + 2 * HOUR_MS / 1000)
        monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + 2 * HOUR_MS * 1_000_000)
        assert jobledger.system_clock() - store.now() > HOUR_MS  # the process's clock stepped
        assert _claim(store, "w2") is None
        renewed = store.renew(
            occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, lease_ms=LEASE_MS
        )
        assert renewed.lease_expires_at < jobledger.system_clock() - HOUR_MS


def test_a_running_worker_finishes_its_work_across_a_forward_step_on_sqlite(tmp_path):
    """End to end: a real worker runs a handler while the clock steps two hours; a second
    worker's claims take nothing, the handler's renewal and result commit, nothing runs twice."""
    from jobledger.engine.heartbeat import ManualHeartbeat

    from .conftest import add_job, event_types, stop_worker

    wall = SteppingClock()
    driver = ManualHeartbeat()
    started, gate = threading.Event(), threading.Event()
    runs: list[int] = []

    def hold(ctx: jobledger.JobContext) -> str:
        runs.append(ctx.fence)
        started.set()
        gate.wait(10)  # until the test has stepped the clock and tried a takeover
        return "done"

    with jobledger.open_store(str(tmp_path / "db" / "step.sqlite3"), clock=wall) as store:
        occurrence = add_job(store, "job-step", kind="hold", clock=wall)
        runtime = jobledger.Runtime(
            store,
            handlers={"hold": hold},
            authorize=jobledger.allow_all,
            clock=wall,
            heartbeat=driver,
            lease_ms=LEASE_MS,
            owner_id="w1",
        )
        worker = jobledger.Worker(
            runtime, concurrency=1, prefetch=0, planner=False, poll_interval=timedelta(seconds=1)
        )
        thread = threading.Thread(
            target=lambda: worker.run(install_signal_handlers=False), daemon=True
        )
        thread.start()
        try:
            assert worker.wait_until_running(10) and started.wait(10)
            wall.step(2 * HOUR_MS)
            with jobledger.open_store(store.target, clock=wall) as other:
                assert other.claim_next(owner_id="w2", lease_ms=LEASE_MS) is None
            driver.tick()  # the worker's keeper renews: its lease is its own still
            renewed = store.get_occurrence(occurrence.id)
            assert renewed.lease_expires_at == wall() + LEASE_MS
            gate.set()
            finished = threading.Event()
            for _ in range(1000):
                if store.get_occurrence(occurrence.id).status == "succeeded":
                    break
                finished.wait(0.01)
        finally:
            gate.set()
            stop_worker(worker, thread)
            runtime.close()
        done = store.get_occurrence(occurrence.id)
        assert (done.status, done.fence, runs) == ("succeeded", occurrence.fence + 1, [1])
        assert "occurrence_reclaimed" not in event_types(store, occurrence.id)
