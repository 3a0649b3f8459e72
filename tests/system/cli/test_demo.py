"""The README's first commands, for real: `jobledger worker examples.demo:app` runs scheduled work
within seconds on a fresh store, stops cleanly on SIGTERM, and `jobledger stats` /
`jobledger explain` then show what happened."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobledger

ROOT = Path(__file__).resolve().parents[3]
JOBLEDGER = Path(sys.executable).with_name("jobledger")
DEADLINE_S = 14  # the heartbeat fires every 5 s and the one-off 3 s after start


def _succeeded(target: Path) -> dict[str, int]:
    """Succeeded occurrences per job, read without creating or migrating anything."""
    try:
        store = jobledger.open_store(target, migrate=False)
    except jobledger.SchedulerError:  # not created yet by the worker
        return {}
    with store:
        page = store.list_occurrences(status="succeeded", limit=100)
    counts: dict[str, int] = {}
    for occurrence in page.items:
        counts[occurrence.job_id] = counts.get(occurrence.job_id, 0) + 1
    return counts


@pytest.mark.acceptance
@pytest.mark.xdist_group("acceptance")
def test_the_demo_worker_runs_scheduled_work_within_seconds(tmp_path):
    target = tmp_path / "data" / "jobledger.sqlite3"
    env = {
        **os.environ,
        "JOBLEDGER_DB": str(target),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        "NO_COLOR": "1",
        "PYTHONUNBUFFERED": "1",
    }
    assert JOBLEDGER.exists(), "install the package first: pip install -e ."
    started = time.monotonic()
    worker = subprocess.Popen(
        [str(JOBLEDGER), "worker", "examples.demo:app"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen: dict[str, int] = {}
        while time.monotonic() - started < DEADLINE_S and worker.poll() is None:
            seen = _succeeded(target)
            if seen.get("demo-hello") and seen.get("demo-heartbeat"):
                break
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, err
    assert seen.get("demo-hello") == 1, (seen, out, err)
    assert seen.get("demo-heartbeat", 0) >= 1, (seen, out, err)
    assert "[demo] hello" in out and "[demo] heartbeat" in out
    assert "worker stopped:" in out and "succeeded" in out
    assert "received signal" in err and "Traceback" not in err
    assert not (tmp_path / "xdg").exists()  # $JOBLEDGER_DB decided the store, not the default

    stats = subprocess.run(
        [str(JOBLEDGER), "--app", "examples.demo:app", "--json", "stats"],  # as the README says
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    document = json.loads(stats.stdout)
    assert document["occurrences"]["byKind"]["demo.heartbeat"]["succeeded"] >= 1
    assert document["throughput"]["totals"]["succeeded"] >= 2
    explained = subprocess.run(
        [str(JOBLEDGER), "explain", "demo-heartbeat"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "schedule: every 5 seconds" in explained.stdout
    assert "current occurrence: occ_" in explained.stdout
    assert time.monotonic() - started < 20
