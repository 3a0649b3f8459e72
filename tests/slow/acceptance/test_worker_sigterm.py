"""Graceful shutdown of a real worker process receiving SIGTERM in the middle of a job.

Whatever the timing, the invariant is the same: the occurrence ends ``succeeded`` exactly once —
either the first worker finished and settled it within its grace period before exiting, or it
released the lease (``occurrence_released``, reason ``worker_shutdown``) and a second worker
completed it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jobledger
from jobledger.testing import run_until_idle

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

WORKER_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from datetime import timedelta
    from pathlib import Path
    import jobledger

    db, marker = sys.argv[1], Path(sys.argv[2])
    work_s, grace_ms = float(sys.argv[3]), int(sys.argv[4])
    app = jobledger.App(db, name="sigterm-test", authorize=jobledger.allow_all)

    @app.handler("slow")
    def slow(ctx):
        marker.write_text(str(ctx.fence))
        deadline = time.monotonic() + work_s
        while time.monotonic() < deadline:
            if ctx.is_cancelled():
                return {"by": "first", "interrupted": True}
            time.sleep(0.02)
        return {"by": "first"}

    with app:
        summary = app.run_worker(concurrency=1, poll_interval=timedelta(milliseconds=50),
                                 grace_period=timedelta(milliseconds=grace_ms),
                                 owner_id="first-worker", lease=timedelta(seconds=30))
    print(json.dumps({"statuses": dict(summary.statuses),
                      "released": [o.id for o in summary.released],
                      "forced": summary.forced}))
    """
)


def wait_for(path: Path, process: subprocess.Popen[str], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"worker exited early: {process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError("the job never started")
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("work_s", "grace_ms", "expect_released"),
    [
        pytest.param(0.5, 20_000, False, id="finishes-within-grace"),
        pytest.param(60, 300, True, id="released-after-grace"),
    ],
)
def test_sigterm_mid_job_settles_exactly_once(tmp_path, work_s, grace_ms, expect_released):
    db = tmp_path / "jobs.sqlite3"
    marker = tmp_path / "started"
    script = tmp_path / "worker.py"
    script.write_text(WORKER_SCRIPT)
    with jobledger.App(db, name="sigterm-test", authorize=jobledger.allow_all) as app:
        app.create_job("long-job", "slow")
        occurrence = app.enqueue("long-job")

    process = subprocess.Popen(
        [sys.executable, str(script), str(db), str(marker), str(work_s), str(grace_ms)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker, process)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert bool(summary["released"]) is expect_released

    with jobledger.App(db, name="sigterm-test", authorize=jobledger.allow_all) as app:
        app.handler("slow")(lambda ctx: {"by": "second", "fence": ctx.fence})
        after_first = app.get_occurrence(occurrence.id)
        if summary["released"]:
            assert after_first.status == "retry_wait"
            assert after_first.attempt == 0  # the interrupted attempt was handed back
            [result] = run_until_idle(app)
            assert (result.status, result.result) == ("succeeded", {"by": "second", "fence": 2})
        else:
            assert after_first.status == "succeeded"
            assert after_first.result == {"by": "first"}
            assert list(run_until_idle(app)) == []
        final = app.get_occurrence(occurrence.id)
        events = list(reversed(app.history(occurrence_id=occurrence.id)))

    assert final.status == "succeeded"
    assert [e.type for e in events].count("occurrence_succeeded") == 1
    released = [e for e in events if e.type == "occurrence_released"]
    if summary["released"]:
        assert [(e.owner_id, e.data["reason"]) for e in released] == [
            ("first-worker", "worker_shutdown")
        ]
        first_writes_after_release = [
            e for e in events[events.index(released[0]) + 1 :] if e.owner_id == "first-worker"
        ]
        assert first_writes_after_release == []
    else:
        assert released == []
