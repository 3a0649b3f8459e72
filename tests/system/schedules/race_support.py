"""Racing planners: a shared scenario, a single-planner reference, and the child process body.

Every planner in a race sees the same "now" (one fake clock, or one shared counter across
processes) and ticks once per step between two barriers, so the race is real (they read and
record concurrently) yet the expected result is exact: what one planner alone decides.
"""

from __future__ import annotations

import multiprocessing.synchronize
from collections import Counter
from datetime import timedelta
from typing import Any

import jobledger
from jobledger.planning.planner import Planner
from jobledger.schedules import Cron, Every, MisfirePolicy, Once, schedule_json

from .helpers import AUTHORITY, at, occurrence_rows

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
# Uneven steps: short ones (every slot within the grace), long ones (misfires), one that
# crosses the edit.
STEPS = [700, 1300, 2500, 4000, 900, 60_000, 1000, 1000, 90_500, 300, 5000, 1700] * 3
EDIT_AT_STEP = 17


def create_jobs(store: jobledger.Store) -> None:
    def make(job_id: str, trigger: Any, policy: MisfirePolicy | None = None) -> None:
        store.create_job(
            id=job_id, kind="race", authority=AUTHORITY, trigger=schedule_json(trigger, policy)
        )

    make("second", Every(timedelta(seconds=1)), MisfirePolicy(misfire="catch_up"))
    make("five", Cron("*/5 * * * * *"))
    make(
        "skip",
        Every(timedelta(seconds=3)),
        MisfirePolicy(misfire="skip", misfire_grace=timedelta(seconds=2)),
    )
    make(
        "limited",
        Every(timedelta(seconds=2)),
        MisfirePolicy(misfire="catch_up", catch_up_limit=7, jitter=timedelta(seconds=3)),
    )
    make("once", Once(at(START + 7_500)))
    for index in range(20):
        make(f"bulk-{index:02d}", Every(timedelta(seconds=1 + index % 4)))


def edit_jobs(store: jobledger.Store) -> None:
    job = store.get_job("second")
    assert job is not None
    store.update_job(
        "second",
        expected_revision=job.revision,
        patch={"trigger": schedule_json(Every(timedelta(seconds=4)))},
    )


def outcome(store: jobledger.Store) -> dict[str, Any]:
    """Everything the planners wrote, comparable across stores."""
    occurrences = occurrence_rows(
        store,
        "SELECT job_id, job_revision, scheduled_for, trigger_key, available_at, occurrence_id "
        "FROM occurrences",
    )
    skips = occurrence_rows(
        store, "SELECT job_id, data_json FROM events WHERE event_type = 'schedule_slots_skipped'"
    )
    per_slot = Counter((row["job_id"], int(row["scheduled_for"])) for row in occurrences)
    return {
        "duplicates": {key: n for key, n in per_slot.items() if n > 1},
        "occurrences": sorted(
            (
                row["job_id"],
                int(row["job_revision"]),
                int(row["scheduled_for"]),
                row["trigger_key"],
                int(row["available_at"]),
            )
            for row in occurrences
        ),
        "ids": {row["occurrence_id"] for row in occurrences},
        "skips": sorted((row["job_id"], row["data_json"]) for row in skips),
    }


def reference(path: str) -> dict[str, Any]:
    """The same scenario with one planner alone."""
    now = [START]
    store = jobledger.open_store(path, clock=lambda: now[0])
    try:
        create_jobs(store)
        planner = Planner(store)
        planner.tick()
        for index, step in enumerate(STEPS):
            now[0] += step
            if index == EDIT_AT_STEP:
                edit_jobs(store)
            planner.tick()
        return outcome(store)
    finally:
        store.close()


class SharedClock:
    """A clock every process reads from one shared integer."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self) -> int:
        return int(self.value.value)


def planner_process(
    target: str,
    clock_value: Any,
    barrier: multiprocessing.synchronize.Barrier,
    stop: Any,
    results: Any,
) -> None:
    """A child: its own store handle and planner; one tick per step between two barriers."""
    options: dict[str, Any] = {} if not target.startswith("postgresql") else {"listen": False}
    store = jobledger.open_store(target, clock=SharedClock(clock_value), **options)
    enqueued: list[str] = []
    try:
        planner = Planner(store)
        while True:
            barrier.wait(120)
            if stop.value:
                break
            enqueued += [occurrence.id for occurrence in planner.tick().enqueued]
            barrier.wait(120)
    except BaseException as exc:
        barrier.abort()
        results.put(("error", repr(exc)))
        raise
    finally:
        store.close()
    results.put(("enqueued", enqueued))
