"""`jobledger worker MODULE:APP` runs a real worker process until SIGTERM."""

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

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.acceptance
@pytest.mark.xdist_group("acceptance")
def test_worker_command_runs_an_app_and_stops_gracefully(tmp_path):
    target = str(tmp_path / "store" / "jobs.sqlite3")
    with jobledger.open_store(target) as store:
        store.create_job(
            id="greet-ada",
            kind="greet",
            authority={"principal": {"type": "user", "id": "ada"}},
            payload={"name": "Ada"},
        )
        occurrence = store.enqueue_occurrence(
            job_id="greet-ada", scheduled_for=0, trigger_key="manual:1"
        )
    env = {**os.environ, "JOBLEDGER_STORE": target, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobledger",
            "worker",
            "examples.worker_app:app",
            "--grace-period",
            "5",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        status = None
        with jobledger.open_store(target) as store:
            while time.monotonic() < deadline:
                status = store.get_occurrence(occurrence.id).status
                if status == "succeeded" or process.poll() is not None:
                    break
                time.sleep(0.05)
            assert status == "succeeded"
            assert store.get_occurrence(occurrence.id).result == {"greeting": "Hello, Ada!"}
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    summary = json.loads(out)
    assert summary["statuses"] == {"succeeded": 1}
    assert summary["released"] == []
