"""raise jobledger.Snooze(delay) (SPEC §9): the attempt given back, audited, capped."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger import contract
from jobledger.testing import run_until_idle


def test_snooze_with_max_attempts_one_runs_three_times(app, clock):
    seen: list[int] = []

    @app.handler("poll")
    def poll(ctx: jobledger.JobContext) -> dict[str, int]:
        seen.append(ctx.attempt)
        if len(seen) < 3:
            raise jobledger.Snooze(delay=timedelta(minutes=1))
        return {"runs": len(seen)}

    app.ensure_job("p", "poll", max_attempts=1)
    occurrence = app.enqueue("p")
    run_until_idle(app)
    snoozed = app.get_occurrence(occurrence.id)
    assert snoozed is not None
    assert (snoozed.status, snoozed.attempt, snoozed.snoozes) == ("retry_wait", 0, 1)
    assert snoozed.available_at == clock() + 60_000
    run_until_idle(app)  # not due yet: nothing runs
    assert len(seen) == 1
    for _ in range(2):
        clock.advance(timedelta(minutes=1))
        run_until_idle(app)
    assert seen == [1, 1, 1]  # the same attempt each run
    done = app.get_occurrence(occurrence.id)
    assert done is not None
    assert (done.status, done.attempt, done.max_attempts, done.snoozes) == ("succeeded", 1, 1, 2)
    assert app.result(occurrence.id, timeout=timedelta(0)) == {"runs": 3}
    events = list(app.history(occurrence_id=occurrence.id))
    snoozes = [event for event in events if event.type == "occurrence_snoozed"]
    assert [event.data for event in reversed(snoozes)] == [
        {"delay": 60_000, "until": clock() - 60_000, "snoozes": 1},
        {"delay": 60_000, "until": clock(), "snoozes": 2},
    ]
    assert not [event for event in events if event.type == "occurrence_retry_scheduled"]


def test_a_snooze_past_the_cap_is_a_dead_letter(app, clock, monkeypatch):
    monkeypatch.setattr(contract, "MAX_SNOOZES", 2)
    runs: list[int] = []

    @app.handler("poll")
    def poll(ctx: jobledger.JobContext) -> None:
        runs.append(1)
        raise jobledger.Snooze(delay=timedelta(seconds=1))

    app.ensure_job("p", "poll", max_attempts=1)
    occurrence = app.enqueue("p")
    for _ in range(4):
        run_until_idle(app)
        clock.advance(timedelta(seconds=1))
    assert len(runs) == 3  # two snoozes, then the one past the cap
    dead = app.get_occurrence(occurrence.id)
    assert dead is not None
    assert dead.status == "dead_letter"
    assert dead.last_error["code"] == contract.SNOOZE_LIMIT_CODE
    with pytest.raises(jobledger.JobFailed):
        app.result(occurrence.id, timeout=timedelta(0))


def test_snooze_takes_a_bounded_timedelta():
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Snooze(delay=5)  # type: ignore[arg-type]
    with pytest.raises(jobledger.InvalidArgument):
        jobledger.Snooze(delay=timedelta(days=400))
    assert jobledger.Snooze(delay=timedelta(seconds=2)).delay_ms == 2000
