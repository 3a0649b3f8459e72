"""PostgreSQL faults on a private cluster (never the shared server): a backend terminated in the
middle of a transaction and at COMMIT, and a worker running through terminations, stalled
commits and a server restart.

* Mid-transaction: a second session holds the job's row lock, so ``update_job`` blocks inside
  its transaction; that backend is terminated. Nothing was committed, and jobledger knows it:
  ``commitState: "not_committed"`` — checked: the job is unchanged.
* At COMMIT: ``synchronous_standby_names`` names a standby that does not exist, so every COMMIT
  is written locally and then waits for it (``wait_event = 'SyncRep'``); that backend is
  terminated. The client cannot know whether the commit happened: ``"unknown"`` — and here it
  *did* happen (PostgreSQL commits locally before waiting), which is exactly why "unknown" must
  never be reported as "not_committed".
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobledger
from tests.slow.chaos.pgcluster import ClusterUnavailable, PrivateCluster, find_pg_bin

WORKER = Path(__file__).parents[1] / "chaos" / "chaos_worker.py"
AUTHORITY = {"principal": {"type": "user", "id": "faults"}}

pytestmark = [pytest.mark.xdist_group("faults")]


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    if find_pg_bin() is None:
        pytest.skip("no PostgreSQL server binaries for a private cluster")
    try:
        made = PrivateCluster.create()
    except ClusterUnavailable as exc:
        pytest.skip(f"cannot make a private PostgreSQL cluster: {exc}")
    try:
        yield made
    finally:
        made.remove()


@pytest.fixture
def url(cluster: PrivateCluster, request: pytest.FixtureRequest) -> str:
    name = f"faults_{request.node.name.split('[')[0][-40:].lower()}"
    cluster.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return cluster.database(name)


def _in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_for_backend(cluster: PrivateCluster, database: str, condition: str) -> int:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rows = cluster.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'jobledger' "
            f"AND datname = '{database}' AND {condition}"
        )
        if rows:
            return int(rows[0][0])  # type: ignore[call-overload]
        time.sleep(0.02)
    raise AssertionError(f"no backend with {condition}")


def _unavailable(outcome: dict[str, Any], commit_state: str) -> jobledger.SchedulerError:
    error = outcome.get("error")
    assert isinstance(error, jobledger.SchedulerError), outcome
    assert error.code == "SCHEDULER_STORAGE_UNAVAILABLE", error
    assert error.details is not None and error.details["commitState"] == commit_state, error
    return error


def test_a_backend_terminated_mid_transaction_commits_nothing(cluster, url):
    import psycopg

    database = url.rsplit("/", 1)[1]
    with jobledger.open_store(url, listen=False) as store:
        job = store.create_job(id="job", kind="work", authority=AUTHORITY)
        with psycopg.connect(url) as blocker:
            blocker.execute("SELECT 1 FROM jobledger.jobs WHERE job_id = 'job' FOR UPDATE")
            thread, outcome = _in_thread(
                lambda: store.update_job("job", expected_revision=1, patch={"max_attempts": 7})
            )
            pid = _wait_for_backend(cluster, database, "wait_event_type = 'Lock'")
            cluster.execute(f"SELECT pg_terminate_backend({pid})")
            thread.join(20)
            blocker.rollback()
        _unavailable(outcome, "not_committed")
        after = store.get_job("job")
        assert (after.revision, after.max_attempts) == (job.revision, job.max_attempts)
        # Work resumes on a fresh connection.
        assert store.update_job("job", expected_revision=1, patch={"max_attempts": 7}).revision == 2
        assert store.verify().ok


@pytest.fixture
def stalled_commits(cluster: PrivateCluster) -> Iterator[Any]:
    """``stall(True)``: every COMMIT waits for a standby that does not exist; ``stall(False)``."""

    def stall(on: bool) -> None:
        value = "'jobledger_nonexistent_standby'" if on else "''"
        cluster.execute(f"ALTER SYSTEM SET synchronous_standby_names = {value}")
        cluster.execute("SELECT pg_reload_conf()")
        time.sleep(0.2)

    try:
        yield stall
    finally:
        stall(False)


def test_a_backend_terminated_at_commit_is_unknown_and_may_have_committed(
    cluster, url, stalled_commits
):
    database = url.rsplit("/", 1)[1]
    with jobledger.open_store(url, listen=False) as store:
        store.create_job(id="first", kind="work", authority=AUTHORITY)
        stalled_commits(True)
        thread, outcome = _in_thread(
            lambda: store.create_job(id="during", kind="work", authority=AUTHORITY)
        )
        pid = _wait_for_backend(cluster, database, "wait_event = 'SyncRep'")
        cluster.execute(f"SELECT pg_terminate_backend({pid})")
        thread.join(20)
        stalled_commits(False)
        _unavailable(outcome, "unknown")
        # It was written locally before the wait: "unknown" was the truth, not "not_committed".
        assert store.get_job("during") is not None
        store.create_job(id="after", kind="work", authority=AUTHORITY)
        assert store.verify().ok


def test_the_one_round_trip_enqueue_terminated_at_commit_is_unknown(cluster, url, stalled_commits):
    database = url.rsplit("/", 1)[1]
    with jobledger.App(url, name="faults", authorize=jobledger.allow_all) as app:
        app.ensure_job("job", "work")
        stalled_commits(True)
        thread, outcome = _in_thread(lambda: app.enqueue("job", key="order-1"))
        pid = _wait_for_backend(cluster, database, "wait_event = 'SyncRep'")
        cluster.execute(f"SELECT pg_terminate_backend({pid})")
        thread.join(20)
        stalled_commits(False)
        _unavailable(outcome, "unknown")
        # With an idempotency key the caller can simply repeat it: one occurrence either way.
        again = app.enqueue("job", key="order-1")
        assert again.deduplicated
        assert app.store.count_occurrences()[0].count == 1


@pytest.mark.acceptance
@pytest.mark.timeout(240)
def test_a_worker_runs_through_terminations_stalls_and_a_restart(
    cluster, url, stalled_commits, tmp_path
):
    """Drains 300 occurrences while its backends are terminated, its commits stall and are cut
    off (outcome unknown), and the server restarts; then every occurrence succeeded exactly
    once and the worker's summary counts what it did."""
    database = url.rsplit("/", 1)[1]
    backlog = 300
    with jobledger.App(url, name="faults", authorize=jobledger.allow_all) as app:
        app.ensure_job("work", "work", max_attempts=10)
        ids = [o.id for o in app.enqueue_many("work", [{"ms": 20}] * backlog)]
    config = {
        "target": url,
        "owner": "through-pg-faults",
        "effects": str(tmp_path / "effects.jsonl"),
        "planner": False,
        "schedules": False,
        "concurrency": 2,
        "prefetch": 8,
        "lease_s": 5,
        "reap_s": 2,
        "poll_s": 0.2,
        "summary": str(tmp_path / "summary.json"),
        "ready": str(tmp_path / "ready"),
        "store_options": {"pool_max_size": 4},
    }
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(config)], stdout=log, stderr=subprocess.STDOUT
        )
    faults: Counter[str] = Counter()
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert worker.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        time.sleep(0.5)
        for _ in range(2):
            faults["terminated"] += len(
                cluster.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{database}' AND application_name LIKE 'jobledger%'"
                )
            )
            time.sleep(0.5)
        stalled_commits(True)
        stop = time.monotonic() + 1.5
        while time.monotonic() < stop:
            faults["cut_at_commit"] += len(
                cluster.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    f"WHERE datname = '{database}' AND wait_event = 'SyncRep'"
                )
            )
            time.sleep(0.1)
        stalled_commits(False)
        cluster.restart("fast", down_s=0.5)
        faults["restarts"] += 1
        assert worker.poll() is None, "the worker died in the faults"
        with jobledger.open_store(url, listen=False) as store:
            deadline = time.monotonic() + 120
            while True:
                counts = {c.status: c.count for c in store.count_occurrences()}
                if counts == {"succeeded": backlog}:
                    break
                assert worker.poll() is None, log_path.read_text()[-3000:]
                assert time.monotonic() < deadline, f"not drained: {counts}"
                time.sleep(0.2)
            for occurrence_id in ids:
                occurrence = store.get_occurrence(occurrence_id)
                succeeded = [
                    e
                    for e in store.history(occurrence_id=occurrence_id, limit=200)
                    if e.type == "occurrence_succeeded"
                ]
                assert [e.fence for e in succeeded] == [occurrence.fence]
            assert store.verify().ok
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert worker.returncode == 0, log_path.read_text()[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    ends = Counter(
        json.loads(line)["occ"]
        for line in (tmp_path / "effects.jsonl").read_text().splitlines()
        if '"end"' in line
    )
    log = log_path.read_text()
    report = {
        "faults": dict(faults),
        "summary": summary,
        "handler_completions": sum(ends.values()),
        "duplicated_side_effects": sum(n - 1 for n in ends.values()),
        "retried_settles": log.count("will retry"),
    }
    print(json.dumps(report))
    # Every handler run is in the summary, and every success this worker stored is reported as
    # one — also a settle whose COMMIT was cut off but had committed (test_unknown_settle.py).
    # A run whose lease was lost in the faults would be "aborted" and run again.
    statuses = summary["statuses"]
    assert statuses.get("succeeded", 0) == backlog
    assert backlog + statuses.get("aborted", 0) == report["handler_completions"]
