"""What a step of the store's clock does, measured on both stores, and how a worker sees one.

The store's clock is the process clock on SQLite and the database server's clock on PostgreSQL;
here both stores are given a :class:`SteppingClock` (a fake clock that may also jump back), so
each test is the same step on either store. ``docs/guarantees.md`` ("Clock steps") reports these
results. The worker's detection is stepped by hand: a fake monotonic clock and
``Housekeeper.run_due``.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

import jobledger
from jobledger.engine.housekeeping import CLOCK_STEP_THRESHOLD, Housekeeper
from jobledger.engine.options import WorkerOptions
from jobledger.metrics import PrometheusObserver
from jobledger.planning.declare import declare_schedule
from jobledger.planning.planner import Planner
from jobledger.testing import DEFAULT_START_MS

from .conftest import AUTHORITY

HOUR_MS = 3_600_000
LEASE_MS = 60_000


class SteppingClock:
    """Epoch ms that move only when told to — forward or, unlike FakeClock, back."""

    def __init__(self, start_ms: int = DEFAULT_START_MS) -> None:
        self.now = start_ms
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def step(self, delta_ms: int) -> int:
        with self._lock:
            self.now += delta_ms
            return self.now


@pytest.fixture
def wall() -> SteppingClock:
    return SteppingClock()


@pytest.fixture
def stepped(any_target: str, wall: SteppingClock):
    with jobledger.open_store(any_target, clock=wall) as opened:
        yield opened


def _job(store: jobledger.Store, job_id: str, *, max_attempts: int = 3) -> None:
    store.create_job(id=job_id, kind="echo", authority=AUTHORITY, max_attempts=max_attempts)


def _claim(store: jobledger.Store, owner: str) -> jobledger.Occurrence | None:
    return store.claim_next(owner_id=owner, lease_ms=LEASE_MS, kinds={"echo"})


def _every_minute(store: jobledger.Store, wall: SteppingClock) -> Planner:
    """A schedule every minute that has fired once; its planner."""
    declare_schedule(store, "every-minute", "echo", authority=AUTHORITY, every=timedelta(minutes=1))
    planner = Planner(store)
    first = planner.tick().next_due_at
    assert first is not None
    wall.step(first - wall())
    assert len(planner.tick().enqueued) == 1
    return planner


# -- one hour back ------------------------------------------------------------------------------


def test_a_step_back_pauses_due_work_until_the_clock_catches_up(stepped, wall):
    _job(stepped, "job")
    due_at = wall()
    stepped.enqueue_occurrence(job_id="job", scheduled_for=due_at, trigger_key="due")
    wall.step(-HOUR_MS)
    # Due an instant ago, the occurrence is an hour in the future now: nothing is claimable.
    assert _claim(stepped, "w1") is None
    assert stepped.oldest_due(kinds={"echo"}) == []
    wall.step(HOUR_MS - 1)
    assert _claim(stepped, "w1") is None
    wall.step(1)
    claimed = _claim(stepped, "w1")
    assert claimed is not None and claimed.scheduled_for == due_at


def test_a_step_back_pauses_schedules_until_the_clock_catches_up(stepped, wall):
    planner = _every_minute(stepped, wall)
    next_due = planner.tick().next_due_at
    assert next_due is not None and next_due > wall()
    wall.step(-HOUR_MS)
    paused = planner.tick()
    assert paused.enqueued == [] and paused.skipped == []
    assert paused.next_due_at == next_due  # an hour and a bit away now
    wall.step(next_due - wall() - 1)
    assert planner.tick().enqueued == []
    wall.step(1)
    resumed = planner.tick()
    assert [o.scheduled_for for o in resumed.enqueued] == [next_due]


def test_a_step_back_makes_a_held_lease_last_that_much_longer(stepped, wall):
    _job(stepped, "job")
    stepped.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key="t")
    claimed = _claim(stepped, "w1")
    assert claimed is not None
    expires = claimed.lease_expires_at
    assert expires == wall() + LEASE_MS
    wall.step(-HOUR_MS)
    # A renewal never shortens a lease: the expiry stays on the old time line…
    renewed = stepped.renew(
        occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, lease_ms=LEASE_MS
    )
    assert renewed.lease_expires_at == expires == wall() + HOUR_MS + LEASE_MS
    # …so if its holder dies now (and nothing reaps it), the lease runs an hour longer.
    wall.step(HOUR_MS + LEASE_MS - 1)
    assert _claim(stepped, "w2") is None
    wall.step(1)
    taken = _claim(stepped, "w2")
    assert taken is not None and taken.id == claimed.id and taken.reclaimed


# -- two hours forward --------------------------------------------------------------------------


def test_a_step_forward_hands_every_live_lease_to_the_next_claim(stepped, wall):
    _job(stepped, "job")
    _job(stepped, "last", max_attempts=1)
    for key in ("a", "b"):
        stepped.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key=key)
    final = stepped.enqueue_occurrence(job_id="last", scheduled_for=wall(), trigger_key="z")
    held = stepped.claim_batch(owner_id="w1", lease_ms=LEASE_MS, limit=10, kinds={"echo"})
    assert len(held) == 3
    wall.step(2 * HOUR_MS)
    # The holder is alive and would renew on its next beat, but every lease expired at once:
    # the next claim, by any worker, takes them over (a final attempt is dead-lettered).
    taken = stepped.claim_batch(owner_id="w2", lease_ms=LEASE_MS, limit=10, kinds={"echo"})
    assert sorted(o.id for o in taken) == sorted(o.id for o in held if o.id != final.id)
    assert all(o.reclaimed for o in taken)
    dead = stepped.get_occurrence(final.id)
    assert (dead.status, dead.last_error["code"]) == ("dead_letter", "lease_expired")
    renewals = [
        jobledger.Renewal(occurrence_id=o.id, owner_id="w1", fence=o.fence, lease_ms=LEASE_MS)
        for o in held
    ]
    assert all(isinstance(r, jobledger.LeaseLost) for r in stepped.renew_batch(renewals))
    with pytest.raises(jobledger.LeaseLost):
        stepped.settle(
            occurrence_id=held[0].id, owner_id="w1", fence=held[0].fence, outcome="succeeded"
        )


def test_a_step_forward_without_a_claim_in_between_leaves_the_holder_its_lease_lost(stepped, wall):
    _job(stepped, "job")
    stepped.enqueue_occurrence(job_id="job", scheduled_for=wall(), trigger_key="t")
    claimed = _claim(stepped, "w1")
    assert claimed is not None
    wall.step(2 * HOUR_MS)
    # Nobody claimed it yet, but an expired lease cannot be renewed or settled either.
    with pytest.raises(jobledger.LeaseLost):
        stepped.renew(
            occurrence_id=claimed.id, owner_id="w1", fence=claimed.fence, lease_ms=LEASE_MS
        )
    assert stepped.get_occurrence(claimed.id).status == "running"  # until the next claim


def test_a_step_forward_makes_delayed_work_and_retries_due_at_once(stepped, wall):
    _job(stepped, "job")
    delayed = stepped.enqueue_occurrence(
        job_id="job", scheduled_for=wall() + HOUR_MS, trigger_key="later"
    )
    assert _claim(stepped, "w1") is None
    wall.step(2 * HOUR_MS)
    claimed = _claim(stepped, "w1")
    assert claimed is not None and claimed.id == delayed.id


def test_a_step_forward_fires_a_schedule_once_for_the_missed_slots(stepped, wall):
    planner = _every_minute(stepped, wall)
    wall.step(2 * HOUR_MS)
    report = planner.tick()
    # The default misfire policy ("coalesce"): one occurrence for the 120 missed slots.
    assert len(report.enqueued) == 1
    assert sum(run.count for run in report.skipped) == 119


# -- the worker notices -------------------------------------------------------------------------


class Ticks:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _housekeeper(store, ticks: Ticks, observer: PrometheusObserver) -> Housekeeper:
    return Housekeeper(
        store,
        owner_id="w-clock",
        options=WorkerOptions(planner=False),
        kinds=frozenset({"echo"}),
        observer=observer,
        monotonic=ticks,
        record=lambda name, amount: None,
        poll_timeout=lambda: 1.0,
    )


def _steps(observer: PrometheusObserver, direction: str) -> float:
    value = observer.registry.get_sample_value(
        "jobledger_clock_steps_total", {"direction": direction}
    )
    return value or 0.0


def test_a_worker_reports_a_step_of_the_store_clock(stepped, wall, caplog):
    caplog.set_level(logging.WARNING, logger="jobledger.worker")
    ticks, observer = Ticks(), PrometheusObserver()
    keeper = _housekeeper(stepped, ticks, observer)
    keeper.announce()
    keeper.run_due()

    def warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "clock stepped" in r.getMessage()]

    # Time passing, and a drift up to the threshold, are not steps.
    threshold_ms = CLOCK_STEP_THRESHOLD // timedelta(milliseconds=1)
    for _ in range(3):
        wall.step(2_000)
        ticks.now += 2
        keeper.run_due()
    wall.step(2_000 + threshold_ms)
    ticks.now += 2
    keeper.run_due()
    assert warnings() == []
    assert _steps(observer, "forward") == _steps(observer, "backward") == 0

    wall.step(2_000 - HOUR_MS)  # two seconds pass, and the clock is set back an hour
    ticks.now += 2
    keeper.run_due()
    [back] = warnings()
    assert "stepped backward by 3600.0 s" in back
    assert (_steps(observer, "backward"), _steps(observer, "forward")) == (1, 0)

    wall.step(2_000 + 2 * HOUR_MS)
    ticks.now += 2
    keeper.run_due()
    assert "stepped forward by 7200.0 s" in warnings()[1]
    assert (_steps(observer, "backward"), _steps(observer, "forward")) == (1, 1)

    # A pass with no step after it: nothing more.
    wall.step(2_000)
    ticks.now += 2
    keeper.run_due()
    assert len(warnings()) == 2
    keeper.farewell()


def test_a_step_just_past_the_threshold_counts(stepped, wall):
    ticks, observer = Ticks(), PrometheusObserver()
    keeper = _housekeeper(stepped, ticks, observer)
    keeper.announce()
    keeper.run_due()
    threshold_ms = CLOCK_STEP_THRESHOLD // timedelta(milliseconds=1)
    wall.step(-(threshold_ms + 1))
    keeper.run_due()
    assert _steps(observer, "backward") == 1
    keeper.farewell()


class SlowClockRead:
    """The store, whose ``now()`` takes ``delay_s`` of the fake monotonic clock when asked to."""

    def __init__(self, store: jobledger.Store, ticks: Ticks) -> None:
        self._store = store
        self._ticks = ticks
        self.delay_s = 0.0

    def now(self) -> int:
        self._ticks.now += self.delay_s
        return self._store.now()

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def test_a_slow_clock_read_is_not_taken_for_a_step(stepped, wall, caplog):
    caplog.set_level(logging.WARNING, logger="jobledger.worker")
    ticks, observer = Ticks(), PrometheusObserver()
    slow = SlowClockRead(stepped, ticks)
    keeper = _housekeeper(slow, ticks, observer)
    keeper.announce()
    keeper.run_due()
    # A read of the store's clock that took 10 s (a PostgreSQL round trip through an outage)
    # cannot say when the reading was taken: it is not compared…
    slow.delay_s = 10
    keeper.run_due()
    assert _steps(observer, "forward") == _steps(observer, "backward") == 0
    # …and the next pass compares with the last good reading.
    slow.delay_s = 0
    wall.step(-HOUR_MS)
    keeper.run_due()
    assert _steps(observer, "backward") == 1
    assert "stepped backward by 3610.0 s" in caplog.records[-1].getMessage()
    keeper.farewell()
