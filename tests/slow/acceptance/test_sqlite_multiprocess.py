"""Four real processes drain one SQLite file: every occurrence runs exactly once.

Each process runs ``sqlite_drain_worker.py`` with the real system clock and reports what it
claimed, settled and any error through a JSON file. Leases are far longer than the run, so a
correct store produces no reclaims at all: one claim and one success per occurrence.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import jobledger

WORKER = Path(__file__).with_name("sqlite_drain_worker.py")
PROCESSES = 4
OCCURRENCES = 2_000
AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]


def _enqueue(db_path: Path) -> list[str]:
    with jobledger.open_store(str(db_path)) as store:
        store.create_job(id="drain", kind="noop", authority=AUTHORITY)
        start = jobledger.system_clock() - OCCURRENCES  # every occurrence is already due
        return [
            store.enqueue_occurrence(
                job_id="drain", scheduled_for=start + index, trigger_key=f"tick-{index}"
            ).id
            for index in range(OCCURRENCES)
        ]


def _wait_for(paths: list[Path], processes: list[subprocess.Popen[bytes]], timeout: float):
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        failed = [p.returncode for p in processes if p.poll() not in (None, 0)]
        assert not failed, f"a worker exited early with {failed}"
        assert time.monotonic() < deadline, "workers did not get ready in time"
        time.sleep(0.01)


def test_four_processes_drain_one_file_exactly_once(tmp_path):
    db_path = tmp_path / "db" / "jobledger.sqlite3"
    expected = _enqueue(db_path)
    go_file = tmp_path / "go"
    results = [tmp_path / f"worker-{index}.json" for index in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(db_path), f"worker-{index}", str(go_file), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for index, out in enumerate(results)
    ]
    try:
        _wait_for([Path(f"{out}.ready") for out in results], processes, timeout=30)
        go_file.write_text("go")
        outputs = [p.communicate(timeout=45)[0].decode(errors="replace") for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert [p.returncode for p in processes] == [0] * PROCESSES, outputs
    reports = [json.loads(path.read_text()) for path in results]
    errors = [error for report in reports for error in report["errors"]]
    assert errors == [], "\n".join(e["traceback"] for e in errors)

    claims = Counter(occurrence_id for r in reports for occurrence_id in r["claimed"])
    assert sorted(claims) == sorted(expected)
    assert set(claims.values()) == {1}, "an occurrence was claimed more than once"
    assert sum(r["settled"] for r in reports) == OCCURRENCES
    busy_processes = [r["owner"] for r in reports if r["claimed"]]
    assert len(busy_processes) > 1, f"all claims went to one process: {busy_processes}"

    owners = {occurrence_id: r["owner"] for r in reports for occurrence_id in r["claimed"]}
    with jobledger.open_store(str(db_path)) as store:
        assert store.claim_next(owner_id="checker", lease_ms=1_000) is None
        for occurrence_id in expected:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence is not None
            assert (occurrence.status, occurrence.attempt, occurrence.fence) == (
                "succeeded",
                1,
                1,
            )
            events = Counter(e.type for e in store.history(occurrence_id=occurrence_id))
            assert events == {
                "occurrence_enqueued": 1,
                "occurrence_claimed": 1,
                "occurrence_succeeded": 1,
            }, (occurrence_id, events)
            assert occurrence.result == {"owner": owners[occurrence_id]}
