"""Kill harness (SPEC §9): handlers of an ``on_lost_lease="adjudicate"`` kind SIGKILLed mid-run.

Each worker process claims one occurrence and is killed while its handler runs. Then: no
occurrence is re-run automatically (the next claim pass makes each an outcome-unknown dead
letter), every one is listed as a case, a stale evidence digest and a second decision are
refused, ``applied`` never calls the handler again and ``not_applied`` calls it exactly once.
A short run is in the default suite; the long one is marked ``acceptance``.

And a real worker killed mid-run (issue 30, item 5): its claims made ahead of its slots were
never started, so they are given back and run — never cases; each case says when its handler
began.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import FakeClock, run_until_idle

WORKER = Path(__file__).with_name("adjudicate_kill_worker.py")
ROOT = Path(__file__).resolve().parents[3]
START_MS = 1_800_000_000_000


def _calls(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [line.split()[0] for line in path.read_text(encoding="utf-8").splitlines() if line]


def _kill_mid_run(target: str, calls_file: Path, count: int, parallel: int) -> None:
    """Start workers, ``parallel`` at a time; SIGKILL each once its handler has started."""
    started = 0
    while started < count:
        batch = min(parallel, count - started)
        before = len(_calls(calls_file))
        workers = [
            subprocess.Popen(
                [sys.executable, str(WORKER), target, str(START_MS), str(calls_file)],
                env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
            )
            for _ in range(batch)
        ]
        deadline = time.monotonic() + 120
        try:
            while len(_calls(calls_file)) < before + batch:  # every handler is running
                assert time.monotonic() < deadline, "the workers did not start their handlers"
                for worker in workers:
                    assert worker.poll() is None, f"a worker exited with {worker.returncode}"
                time.sleep(0.02)
        finally:
            for worker in workers:
                worker.send_signal(signal.SIGKILL)
                worker.wait(30)
        started += batch


def _run(target: str, tmp_path: Path, count: int, parallel: int) -> None:
    calls_file = tmp_path / "calls.txt"
    clock = FakeClock(START_MS)
    with jobledger.App(target, clock=clock, authorize=jobledger.allow_all) as app:

        @app.handler("charge", on_lost_lease="adjudicate")
        def charge(ctx: jobledger.JobContext) -> dict[str, str]:
            with calls_file.open("a", encoding="utf-8") as calls:
                calls.write(f"{ctx.occurrence.id} survivor\n")
            return {"charged": ctx.occurrence.id}

        app.ensure_job("pay", "charge", max_attempts=5)
        ids = {app.enqueue("pay", payload={"n": index}).id for index in range(count)}
        _kill_mid_run(target, calls_file, count, parallel)
        assert Counter(_calls(calls_file)) == Counter(dict.fromkeys(ids, 1))

        clock.advance(timedelta(minutes=10))  # every killed worker's lease has run out
        run_until_idle(app)
        assert Counter(_calls(calls_file)) == Counter(dict.fromkeys(ids, 1))  # 0 re-runs
        cases = app.adjudication_cases(limit=500)
        assert {case.occurrence_id for case in cases} == ids
        for case in cases:
            occurrence = app.get_occurrence(case.occurrence_id)
            assert occurrence is not None and occurrence.status == "dead_letter"
            assert case.eligible and case.error_code == "SCHEDULER_OUTCOME_UNKNOWN"

        ordered = sorted(cases, key=lambda case: case.occurrence_id)
        applied = ordered[::2]
        not_applied = ordered[1::2]
        with pytest.raises(jobledger.AdjudicationConflict) as raised:
            app.adjudicate(
                ordered[0].occurrence_id,
                decision="applied",
                evidence_digest="sha256:" + "f" * 64,
                reason="stale",
            )
        assert raised.value.code == "SCHEDULER_ADJUDICATION_EVIDENCE_CONFLICT"
        for group, decision in ((applied, "applied"), (not_applied, "not_applied")):
            for case in group:
                assert case.evidence_digest is not None
                app.adjudicate(
                    case.occurrence_id,
                    decision=decision,
                    evidence_digest=case.evidence_digest,
                    reason=f"checked the provider: {decision}",
                    actor="ops:harness",
                )
        assert ordered[0].evidence_digest is not None
        with pytest.raises(jobledger.AdjudicationConflict) as raised:
            app.adjudicate(
                ordered[0].occurrence_id,
                decision="not_applied",
                evidence_digest=ordered[0].evidence_digest,
                reason="again",
            )
        assert raised.value.code == "SCHEDULER_ADJUDICATION_ALREADY_RECORDED"

        for _ in range(3):
            run_until_idle(app, limit=10_000)
            clock.advance(timedelta(minutes=10))
        calls = Counter(_calls(calls_file))
        for case in applied:
            assert calls[case.occurrence_id] == 1  # never again
            assert app.result(case.occurrence_id, timeout=timedelta(0))["adjudication"] == (
                "applied"
            )
        for case in not_applied:
            assert calls[case.occurrence_id] == 2  # exactly once more
            assert app.result(case.occurrence_id, timeout=timedelta(0)) == {
                "charged": case.occurrence_id
            }
        assert app.adjudication_cases() == []


def test_sigkilled_adjudicate_handlers_short(any_target, tmp_path):
    _run(any_target, tmp_path, count=3, parallel=3)


@pytest.mark.acceptance
def test_sigkilled_adjudicate_handlers_long(any_target, tmp_path):
    _run(any_target, tmp_path, count=40, parallel=4)


def test_a_killed_workers_claims_made_ahead_are_run_not_made_cases(any_target, tmp_path):
    """A worker with four slots and the default prefetch claims all ten payments; its four
    handlers run (they block) when it is SIGKILLed. Before, all ten became outcome-unknown
    cases; now the four started ones are, each with when its handler began, and the six it
    never started run once each, elsewhere."""
    calls_file = tmp_path / "calls.txt"
    clock = FakeClock(START_MS)
    with jobledger.App(any_target, clock=clock, authorize=jobledger.allow_all) as app:

        @app.handler("charge", on_lost_lease="adjudicate")
        def charge(ctx: jobledger.JobContext) -> dict[str, str]:
            with calls_file.open("a", encoding="utf-8") as calls:
                calls.write(f"{ctx.occurrence.id} survivor\n")
            return {"charged": ctx.occurrence.id}

        app.ensure_job("pay", "charge", max_attempts=1)
        ids = {app.enqueue("pay", payload={"n": index}).id for index in range(10)}
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), any_target, str(START_MS), str(calls_file), "4"],
            env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        )
        deadline = time.monotonic() + 120
        try:
            while len(_calls(calls_file)) < 4 or any(
                o.status != "running" for o in map(app.get_occurrence, ids) if o is not None
            ):
                assert time.monotonic() < deadline, "the worker did not claim and start"
                assert worker.poll() is None, f"the worker exited with {worker.returncode}"
                time.sleep(0.02)
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait(30)
        started = set(_calls(calls_file))
        assert len(started) == 4

        clock.advance(timedelta(minutes=10))  # the killed worker's leases have run out
        run_until_idle(app)
        cases = app.adjudication_cases(limit=500)
        assert {case.occurrence_id for case in cases} == started
        assert all(case.started_at is not None for case in cases)
        assert all(case.started_at <= START_MS + 60_000 for case in cases)  # type: ignore[operator]
        never_started = ids - started
        assert Counter(_calls(calls_file)) == Counter(dict.fromkeys(ids, 1))
        for occurrence_id in never_started:
            occurrence = app.get_occurrence(occurrence_id)
            assert occurrence is not None
            assert (occurrence.status, occurrence.attempt) == ("succeeded", 1)
