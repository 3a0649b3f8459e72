"""Four real processes drain 10,000 occurrences from one PostgreSQL database, each exactly once.

Each process runs ``pg_drain_worker.py`` with the database clock and its own connection, and
reports what it claimed and settled through a JSON file. Leases are far longer than the run, so a
correct store produces no reclaims at all: one claim and one success per occurrence. The checks
afterwards read the tables directly (10,000 history() calls would dominate the run time).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

import jobledger
from tests.slow.acceptance.pg_enqueue import enqueue_many

WORKER = Path(__file__).with_name("pg_drain_worker.py")
PROCESSES = 4
OCCURRENCES = 10_000

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.postgres,
    pytest.mark.xdist_group("acceptance"),
]


def _enqueue(url: str) -> list[str]:
    return enqueue_many(url, job_id="drain", kind="noop", count=OCCURRENCES)


def _wait_for(paths: list[Path], processes: list[subprocess.Popen[bytes]], timeout: float):
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in paths):
        failed = [p.returncode for p in processes if p.poll() not in (None, 0)]
        assert not failed, f"a worker exited early with {failed}"
        assert time.monotonic() < deadline, "workers did not get ready in time"
        time.sleep(0.01)


def test_four_processes_drain_10000_occurrences_exactly_once(postgres_database_url, tmp_path):
    url = postgres_database_url
    expected = _enqueue(url)
    go_file = tmp_path / "go"
    results = [tmp_path / f"worker-{index}.json" for index in range(PROCESSES)]
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), url, f"worker-{index}", str(go_file), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for index, out in enumerate(results)
    ]
    try:
        _wait_for([Path(f"{out}.ready") for out in results], processes, timeout=60)
        started = time.monotonic()
        go_file.write_text("go")
        outputs = [p.communicate(timeout=100)[0].decode(errors="replace") for p in processes]
        drain_seconds = time.monotonic() - started
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    assert [p.returncode for p in processes] == [0] * PROCESSES, outputs
    reports = [json.loads(path.read_text()) for path in results]
    errors = [error for report in reports for error in report["errors"]]
    assert errors == [], "\n".join(e["traceback"] for e in errors)
    print(f"\ndrained {OCCURRENCES} occurrences with {PROCESSES} processes in {drain_seconds:.1f}s")

    claims = Counter(occurrence_id for r in reports for occurrence_id in r["claimed"])
    assert sorted(claims) == sorted(expected)
    assert set(claims.values()) == {1}, "an occurrence was claimed more than once"
    assert sum(r["settled"] for r in reports) == OCCURRENCES
    busy = [r["owner"] for r in reports if r["claimed"]]
    assert len(busy) == PROCESSES, f"not every process got work: {busy}"

    owners = {occurrence_id: r["owner"] for r in reports for occurrence_id in r["claimed"]}
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT occurrence_id, status, attempt, fence, result_json FROM jobledger.occurrences"
        ).fetchall()
        assert len(rows) == OCCURRENCES
        for occurrence_id, status, attempt, fence, result_json in rows:
            assert (status, attempt, fence) == ("succeeded", 1, 1), occurrence_id
            assert json.loads(result_json) == {"owner": owners[occurrence_id]}
        per_occurrence = conn.execute(
            "SELECT event_type, count(*), count(DISTINCT occurrence_id) FROM jobledger.events "
            "WHERE occurrence_id IS NOT NULL GROUP BY event_type ORDER BY event_type"
        ).fetchall()
        assert per_occurrence == [
            ("occurrence_claimed", OCCURRENCES, OCCURRENCES),
            ("occurrence_enqueued", OCCURRENCES, OCCURRENCES),
            ("occurrence_succeeded", OCCURRENCES, OCCURRENCES),
        ]
        claimers = conn.execute(
            "SELECT occurrence_id, owner_id FROM jobledger.events "
            "WHERE event_type = 'occurrence_claimed'"
        ).fetchall()
        assert dict(claimers) == owners
    with jobledger.open_store(url, listen=False) as store:
        assert store.claim_next(owner_id="checker", lease_ms=1_000) is None
