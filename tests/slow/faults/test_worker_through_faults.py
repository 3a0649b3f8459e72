"""A real worker process keeps running through storage faults and drains everything afterwards.

The worker (``tests/slow/chaos/chaos_worker.py``: ``App.run_worker``) drains a backlog while its
database's storage fails under it — fsync EIO, write EIO, ENOSPC and EROFS from the LD_PRELOAD
shim, one after another, or a real full tmpfs. Claims fail and are tried again, settlements
handed to the settler are kept and retried (their leases still renewed), and once the fault
clears the same process finishes the backlog. Afterwards: every occurrence succeeded exactly
once (one ``occurrence_succeeded`` event, at its final fence), the worker's own summary counts
them all, and the file passes ``integrity_check`` and ``Store.verify()``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

import jobledger

from .conftest import fill, tmpfs

WORKER = Path(__file__).parents[1] / "chaos" / "chaos_worker.py"
BACKLOG = 300

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("faults")]


def _seed(db: Path) -> list[str]:
    with jobledger.App(db, name="faults", authorize=jobledger.allow_all) as app:
        app.ensure_job("work", "work", max_attempts=10)
        return [o.id for o in app.enqueue_many("work", [{"ms": 15}] * BACKLOG)]


def _start_worker(tmp_path: Path, db: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    config = {
        "target": str(db),
        "owner": "through-faults",
        "effects": str(tmp_path / "effects.jsonl"),
        "planner": False,
        "schedules": False,
        "concurrency": 2,
        "prefetch": 8,
        "lease_s": 30,
        "reap_s": 2,
        "poll_s": 0.2,
        "summary": str(tmp_path / "summary.json"),
        "ready": str(tmp_path / "ready"),
    }
    log = (tmp_path / "worker.log").open("wb")
    return subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
    )


def _succeeded(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return int(
            conn.execute("SELECT count(*) FROM occurrences WHERE status = 'succeeded'").fetchone()[
                0
            ]
        )
    except sqlite3.Error:
        return -1
    finally:
        conn.close()


def _drive(
    tmp_path: Path, db: Path, env: dict[str, str], faults: Callable[[], None]
) -> dict[str, object]:
    ids = _seed(db)
    worker = _start_worker(tmp_path, db, env)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "ready").exists():
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        faults()
        assert worker.poll() is None, "the worker died in the fault"
        deadline = time.monotonic() + 90
        while _succeeded(db) < BACKLOG:
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the worker did not drain after the fault"
            time.sleep(0.1)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    log = (tmp_path / "worker.log").read_text()
    assert worker.returncode == 0, log[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    with jobledger.open_store(db) as store:
        assert store.verify().ok
        for occurrence_id in ids:
            occurrence = store.get_occurrence(occurrence_id)
            succeeded = [
                e
                for e in store.history(occurrence_id=occurrence_id, limit=200)
                if e.type == "occurrence_succeeded"
            ]
            assert occurrence.status == "succeeded"
            assert [e.fence for e in succeeded] == [occurrence.fence]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()
    ends = Counter(
        json.loads(line)["occ"]
        for line in (tmp_path / "effects.jsonl").read_text().splitlines()
        if '"end"' in line
    )
    return {
        "summary": summary,
        "retried_settles": log.count("will retry"),
        "failed_claims": log.count("claiming failed"),
        "duplicated_side_effects": sum(n - 1 for n in ends.values()),
    }


def test_a_worker_runs_through_io_errors_and_fsync_failure(shim, tmp_path):
    db = tmp_path / "db" / "store.sqlite3"
    control = tmp_path / "control"
    control.mkdir()
    env = {"LD_PRELOAD": str(shim), "JL_FAULT_DIR": str(control), "JL_FAULT_MATCH": str(db.parent)}

    def faults() -> None:
        for cls, errno_name in (
            ("sync", "EIO"),
            ("write", "EIO"),
            ("write", "ENOSPC"),
            ("write", "EROFS"),
        ):
            time.sleep(0.4)
            (control / cls).write_text(errno_name)
            time.sleep(1.0)
            (control / cls).unlink()

    report = _drive(tmp_path, db, env, faults)
    hits = (control / "hits").read_bytes()
    print(json.dumps({**report, "injected": dict(Counter(hits.decode()))}))
    assert hits, "the shim never fired"
    assert report["summary"]["statuses"].get("succeeded", 0) == BACKLOG


def test_a_worker_runs_through_a_full_disk(tmp_path):
    with tmpfs("8m") as mount:
        db = mount / "db" / "store.sqlite3"

        def faults() -> None:
            time.sleep(0.5)
            filler = fill(mount)
            time.sleep(2.0)
            filler.unlink()

        report = _drive(tmp_path, db, {}, faults)
    print(json.dumps(report))
    assert report["summary"]["statuses"].get("succeeded", 0) == BACKLOG
