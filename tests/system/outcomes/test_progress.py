"""``ctx.progress`` from a handler (issue 32, item 11), on both stores: stored with the
occurrence as the handler reports it, and fenced — an attempt whose lease another worker took
over cannot write it."""

from __future__ import annotations

from datetime import timedelta

import pytest

import jobledger
from jobledger.testing import run_until_idle


def test_a_handler_reports_progress_and_the_occurrence_keeps_the_last(app, clock):
    seen: list[jobledger.Progress] = []

    @app.handler("import")
    def work(ctx: jobledger.JobContext) -> object:
        for step in range(1, 4):
            clock.advance(timedelta(seconds=1))
            seen.append(ctx.progress(step, 3, message=f"file {step}"))
        return "done"

    app.ensure_job("import-files", "import")
    made = app.enqueue("import-files", tags=["customer:21"], meta={"files": 3})
    run_until_idle(app)
    stored = app.store.get_occurrence(made.id)
    assert stored is not None and stored.status == "succeeded"
    assert [(p.done, p.total, p.message) for p in seen] == [
        (1, 3, "file 1"),
        (2, 3, "file 2"),
        (3, 3, "file 3"),
    ]
    assert stored.progress == seen[-1] and stored.progress.attempt == 1
    assert stored.progress.text() == "3 of 3 (100%) — file 3, attempt 1"
    assert stored.tags == ("customer:21",) and stored.meta == {"files": 3}
    with pytest.raises(jobledger.SchedulerError) as refused:
        app.enqueue("import-files", tags=["no spaces allowed"])
    assert refused.value.code == "SCHEDULER_INVALID_ARGUMENT"
    assert refused.value.details["field"] == "tags"


def test_a_superseded_attempt_cannot_write_progress(app, clock):
    outcome: dict[str, object] = {}

    @app.handler("slow")
    def work(ctx: jobledger.JobContext) -> object:
        ctx.progress(1, 10, message="mine")
        # This attempt stalls past its lease; another worker takes the occurrence over.
        clock.advance(timedelta(minutes=10))
        taken = app.store.claim_next(owner_id="other-worker", lease_ms=60_000)
        assert taken is not None and taken.fence > ctx.fence
        outcome["newer"] = taken
        try:
            ctx.progress(9, 10, message="stale")
        except jobledger.LeaseLost:
            outcome["lost"] = True
        outcome["cancelled"] = ctx.is_cancelled()
        return None

    app.ensure_job("slow-job", "slow", max_attempts=3)
    made = app.enqueue("slow-job")
    run_until_idle(app, limit=1)
    assert outcome["lost"] is True and outcome["cancelled"] is True
    stored = app.store.get_occurrence(made.id)
    assert stored is not None and stored.progress is not None
    assert (stored.progress.done, stored.progress.message) == (1, "mine")  # not the stale one
    newer = outcome["newer"]
    assert isinstance(newer, jobledger.Occurrence)
    mine = app.store.record_progress(
        occurrence_id=newer.id, owner_id="other-worker", fence=newer.fence, done=2
    )
    assert mine.attempt == 2 and app.store.get_occurrence(made.id).progress == mine
