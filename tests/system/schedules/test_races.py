"""Many planners on one database, with no leader: exactly one occurrence per slot.

Three planners race in threads (each with its own store handle) and in processes (each opening
its own store), on SQLite and on PostgreSQL. Each step moves the shared clock, lets all three
tick at once, and waits for them; a trigger edit lands mid-stream. The occurrences table must
hold one row per slot, exactly the rows a single planner writes alone (a reference run), and
every new occurrence must be reported by exactly one planner.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

import pytest

from jobledger.planning.planner import Planner
from jobledger.testing import FakeClock

from .race_support import (
    EDIT_AT_STEP,
    START,
    STEPS,
    create_jobs,
    edit_jobs,
    outcome,
    planner_process,
    reference,
)

PLANNERS = 3


@pytest.fixture
def expected(tmp_path):
    return reference(str(tmp_path / "reference.sqlite3"))


def _check(raced, expected, reported_ids):
    assert raced["duplicates"] == {}
    assert raced["occurrences"] == expected["occurrences"]
    assert raced["skips"] == expected["skips"]
    counts = Counter(reported_ids)
    assert [i for i, n in counts.items() if n > 1] == [], "an occurrence reported twice"
    assert set(counts) == raced["ids"], "every new occurrence is reported by one planner"


def test_three_planners_in_threads(store_factory, expected):
    clock = FakeClock(START)
    main = store_factory(clock=clock)
    create_jobs(main)
    handles = [store_factory(clock=clock) for _ in range(PLANNERS)]
    barrier = threading.Barrier(PLANNERS + 1)
    stop = threading.Event()
    reported: list[str] = []
    lost: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(store):
        planner = Planner(store)
        try:
            while True:
                barrier.wait(60)
                if stop.is_set():
                    return
                report = planner.tick()
                with lock:
                    reported.extend(o.id for o in report.enqueued)
                    lost.append(report.lost_races)
                barrier.wait(60)
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    try:
        barrier.wait(60)  # the first tick at START
        barrier.wait(60)
        for index, step in enumerate(STEPS):
            clock.advance(step)
            if index == EDIT_AT_STEP:
                edit_jobs(main)
            barrier.wait(60)
            barrier.wait(60)
    finally:
        stop.set()
        if not errors:
            barrier.wait(60)
        for thread in threads:
            thread.join(60)
    assert errors == []
    assert sum(lost) > 0, "the planners never raced: the test proves nothing"
    _check(outcome(main), expected, reported)


def test_three_planners_in_processes(store_factory, db_target, expected):
    context = multiprocessing.get_context("spawn")
    clock_value = context.Value("q", START)
    main = store_factory(clock=lambda: int(clock_value.value))
    create_jobs(main)
    barrier = context.Barrier(PLANNERS + 1)
    stop = context.Value("b", 0)
    results = context.Queue()
    processes = [
        context.Process(
            target=planner_process, args=(db_target, clock_value, barrier, stop, results)
        )
        for _ in range(PLANNERS)
    ]
    for process in processes:
        process.start()
    try:
        barrier.wait(120)
        barrier.wait(120)
        for index, step in enumerate(STEPS):
            with clock_value.get_lock():
                clock_value.value += step
            if index == EDIT_AT_STEP:
                edit_jobs(main)
            barrier.wait(120)
            barrier.wait(120)
        stop.value = 1
        barrier.wait(120)
        reported: list[str] = []
        for _ in processes:
            kind, value = results.get(timeout=120)
            assert kind == "enqueued", value
            reported += value
    finally:
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.kill()
    assert [process.exitcode for process in processes] == [0] * PLANNERS
    _check(outcome(main), expected, reported)
