"""A deploy that changes a job's declaration while a worker runs its backlog loses nothing
(SPEC §14; issue 32 item 1).

A real worker process runs ``charge`` jobs; the first one holds its handler open until the test
says go, so a backlog stays queued behind it. A second process — the new release — declares the
job again with a new ``max_attempts``, default payload, priority and a ``@app.handler`` option
(``on_lost_lease``). Every occurrence, the running one and the queued backlog, then succeeds:
none is a ``SCHEDULER_RUNTIME_STALE_REVISION`` dead letter. On both stores.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import jobledger

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]

BACKLOG = 6

APP_MODULE = textwrap.dedent(
    """
    import os, time
    from pathlib import Path
    import jobledger

    RELEASE = int(os.environ["RELEASE"])
    GATE = Path(os.environ["GATE"])
    app = jobledger.App(os.environ["DB"], name="shop", authorize=jobledger.allow_all)

    def charge(ctx):
        Path(str(GATE) + ".started").write_text("started")
        while not GATE.exists():  # held open until the test says go
            time.sleep(0.01)
        return {"order": ctx.payload["order"], "release": RELEASE}

    if RELEASE == 1:
        app.handler("charge")(charge)
        app.ensure_job("charge", "charge", max_attempts=3, payload={"order": 0})
    else:  # the new release: new retry count, default payload, priority, a handler option
        app.handler("charge", on_lost_lease="adjudicate")(charge)
        app.ensure_job("charge", "charge", max_attempts=5, payload={"order": -1}, priority=5)
    """
)


@pytest.fixture
def target(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "db" / "jobledger.sqlite3")
    return str(request.getfixturevalue("postgres_database_url"))


def _env(target: str, tmp_path: Path, release: int) -> dict[str, str]:
    import os

    return {
        **os.environ,
        "DB": target,
        "GATE": str(tmp_path / "gate"),
        "RELEASE": str(release),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }


def _wait(condition, what: str, worker: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if worker.poll() is not None:
            raise AssertionError(f"the worker exited early: {worker.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_changed_declaration_applied_by_another_process_loses_no_backlog(target, tmp_path):
    (tmp_path / "shop.py").write_text(APP_MODULE)
    worker_script = (
        "import shop\nfrom datetime import timedelta\n"
        "with shop.app:\n"
        "    shop.app.run_worker(concurrency=1, poll_interval=timedelta(milliseconds=50))\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", worker_script],
        env=_env(target, tmp_path, 1),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        store = jobledger.open_store(target)
        try:
            _wait(lambda: store.get_job("charge") is not None, "the job", worker)
            ids = [
                store.enqueue_occurrence(
                    job_id="charge",
                    scheduled_for=jobledger.system_clock(),
                    trigger_key=f"key:order-{n}",
                    payload={"order": n},
                ).id
                for n in range(BACKLOG)
            ]
            _wait((tmp_path / "gate.started").exists, "the first charge", worker)
            # The new release declares the job: a second process, while work is live.
            deploy = subprocess.run(
                [sys.executable, "-c", "import shop"],
                env=_env(target, tmp_path, 2),
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert deploy.returncode == 0, deploy.stderr
            job = store.get_job("charge")
            assert job is not None
            assert (job.revision, job.max_attempts, job.on_lost_lease) == (2, 5, "adjudicate")
            live = [store.get_occurrence(i) for i in ids]
            assert {o.status for o in live} <= {"queued", "running"}
            assert {o.max_attempts for o in live} == {5}  # the new retry count follows
            (tmp_path / "gate").write_text("go")

            def all_settled() -> bool:
                return all(
                    store.get_occurrence(i).status in jobledger.contract.TERMINAL_STATUSES
                    for i in ids
                )

            _wait(all_settled, "the backlog", worker)
            done = [store.get_occurrence(i) for i in ids]
            assert [(o.status, o.last_error) for o in done] == [("succeeded", None)] * BACKLOG
            assert [o.result["order"] for o in done] == list(range(BACKLOG))
            assert store.list_dead_letters() == []
        finally:
            store.close()
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
