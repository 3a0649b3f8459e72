"""What a worker's planner loop logs: a routine pass (a schedule's next slot) only at DEBUG, so
a worker running an every-5-seconds job does not log a line per firing; a pass that skipped
slots (coalesced after a restart) at INFO."""

from __future__ import annotations

import logging
from datetime import timedelta

from jobledger.engine.housekeeping import Housekeeper
from jobledger.engine.observe import NO_OBSERVER
from jobledger.engine.options import WorkerOptions
from jobledger.schedules import Every

from .helpers import move_to, schedule_job, utc


def _planned_records(caplog):
    return [
        record
        for record in caplog.records
        if record.name == "jobledger.worker" and record.getMessage().startswith("planned ")
    ]


def test_routine_passes_log_at_debug_and_a_coalescing_one_at_info(store, clock, caplog):
    start = move_to(clock, utc(2026, 1, 1))
    schedule_job(store, "beat", Every(timedelta(seconds=5)))
    keeper = Housekeeper(
        store,
        owner_id="w-plan",
        options=WorkerOptions(),
        kinds=frozenset({"beat"}),
        observer=NO_OBSERVER,
        monotonic=lambda: 0.0,
        record=lambda name, amount: None,
        poll_timeout=lambda: 1.0,
    )
    caplog.set_level(logging.DEBUG, logger="jobledger.worker")
    keeper.plan_once()
    for second in (5, 10, 15):  # on time: one slot a pass
        move_to(clock, start + second * 1000)
        keeper.plan_once()
    routine = _planned_records(caplog)
    assert [(r.levelno, r.getMessage()) for r in routine] == [
        (logging.DEBUG, "planned 1 occurrence(s)")
    ] * 3
    caplog.clear()
    move_to(clock, start + 73_000)  # stopped for 58 s: eleven slots, coalesced into one
    keeper.plan_once()
    [restart] = _planned_records(caplog)
    assert restart.levelno == logging.INFO
