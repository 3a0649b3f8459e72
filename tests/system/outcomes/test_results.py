"""app.result / result_async (SPEC §9): the three outcomes, across processes, and retention."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock, run_until_idle

WAIT = timedelta(seconds=60)  # a bound on a wait that ends as soon as the settle commits
ROOT = Path(__file__).resolve().parents[3]


def _job(app: jobledger.App, calls: list[object], *, max_attempts: int = 1) -> None:
    @app.handler("work")
    def work(ctx: jobledger.JobContext) -> object:
        calls.append(ctx.occurrence.payload)
        payload = ctx.occurrence.payload
        if payload == "fail":
            raise jobledger.Fail("no", code="boom")
        return {"echo": payload}

    app.ensure_job("j", "work", max_attempts=max_attempts)


def test_result_of_a_success_is_returned_and_its_first_read_recorded(app, clock):
    calls: list[object] = []
    _job(app, calls)
    occurrence = app.enqueue("j", payload="hi")
    run_until_idle(app)
    clock.advance(timedelta(seconds=5))
    assert app.result(occurrence.id, timeout=WAIT) == {"echo": "hi"}
    first = app.store.read_result(occurrence.id)
    assert first is not None
    clock.advance(timedelta(seconds=5))
    assert app.result(occurrence.id, timeout=timedelta(0)) == {"echo": "hi"}
    # result_read_at keeps the first read's instant.
    assert _read_at(app, occurrence.id) == clock() - 5_000


def _read_at(app: jobledger.App, occurrence_id: str) -> int | None:
    store = app.store

    def body(tx):  # type: ignore[no-untyped-def]
        row = tx.one("get_occurrence", {"occurrence_id": occurrence_id})
        return None if row["result_read_at"] is None else int(row["result_read_at"])

    return store._read(body)  # type: ignore[attr-defined]


def test_result_of_a_dead_letter_raises_job_failed_with_its_error(app):
    _job(app, [])
    occurrence = app.enqueue("j", payload="fail")
    run_until_idle(app)
    with pytest.raises(jobledger.JobFailed) as raised:
        app.result(occurrence.id, timeout=WAIT)
    assert raised.value.code == "SCHEDULER_JOB_FAILED"
    assert raised.value.error["code"] == "boom"
    assert raised.value.occurrence.status == "dead_letter"
    assert _read_at(app, occurrence.id) is None


def test_result_of_a_cancelled_occurrence_raises_job_failed(app):
    _job(app, [])
    occurrence = app.enqueue("j", payload="x")
    app.cancel(occurrence.id, reason="not needed")
    with pytest.raises(jobledger.JobFailed) as raised:
        app.result(occurrence.id, timeout=WAIT)
    assert raised.value.error["code"] == "cancelled"


def test_result_not_terminal_in_time_raises_the_builtin_timeout_error(app):
    _job(app, [])
    occurrence = app.enqueue("j", payload="x")
    with pytest.raises(TimeoutError):
        app.result(occurrence.id, timeout=timedelta(0))
    with pytest.raises(TimeoutError):
        asyncio.run(app.result_async(occurrence.id, timeout=timedelta(0)))


def test_result_of_an_unknown_id_is_not_found_and_bad_timeouts_are_refused(app):
    with pytest.raises(jobledger.NotFound):
        app.result("occ_missing", timeout=WAIT)
    with pytest.raises(jobledger.InvalidArgument):
        app.result("occ_missing", timeout=5)  # type: ignore[arg-type]
    with pytest.raises(jobledger.InvalidArgument):
        app.result("occ_missing", timeout=timedelta(seconds=-1))


def test_result_async_wakes_when_another_thread_settles(app):
    _job(app, [])
    occurrence = app.enqueue("j", payload="async")

    async def scenario() -> object:
        waiter = asyncio.create_task(app.result_async(occurrence.id, timeout=WAIT))
        await asyncio.sleep(0)  # let the waiter read once and start waiting
        await asyncio.to_thread(run_until_idle, app)
        return await waiter

    assert asyncio.run(scenario()) == {"echo": "async"}


def test_result_waits_for_a_settle_made_by_another_process(app, any_target, clock):
    """The waiter is this process; the handler runs in a child process on the same store."""
    _job(app, [])
    occurrence = app.enqueue("j", payload="far")
    script = (
        "import sys, jobledger\n"
        "from jobledger.testing import FakeClock, run_until_idle\n"
        "app = jobledger.App(sys.argv[1], clock=FakeClock(int(sys.argv[2])),"
        " authorize=jobledger.allow_all)\n"
        "@app.handler('work')\n"
        "def work(ctx):\n"
        "    return {'echo': ctx.occurrence.payload, 'pid': 'child'}\n"
        "run_until_idle(app)\n"
        "app.close()\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, any_target, str(clock())],
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert app.result(occurrence.id, timeout=WAIT) == {"echo": "far", "pid": "child"}
    finally:
        assert child.wait(timeout=60) == 0


def test_results_survive_a_restart(any_target, clock: FakeClock):
    with jobledger.App(any_target, clock=clock, authorize=jobledger.allow_all) as first:
        _job(first, [])
        occurrence = first.enqueue("j", payload="kept")
        run_until_idle(first)
    with jobledger.App(any_target, clock=clock) as second:
        assert second.result(occurrence.id, timeout=WAIT) == {"echo": "kept"}


def test_prune_keeps_an_unread_result_younger_than_its_retention(app, clock):
    _job(app, [])
    old = app.enqueue("j", payload="old")
    run_until_idle(app)
    clock.advance(timedelta(days=2))
    young = app.enqueue("j", payload="young")
    run_until_idle(app)
    cutoff = clock() - 86_400_000  # a one-day retention
    report = app.store.prune(before=cutoff, actor="ops")
    assert report.occurrences == 1
    assert app.get_occurrence(old.id) is None
    assert app.result(young.id, timeout=timedelta(0)) == {"echo": "young"}
