"""Crash safety on SQLite: worker processes SIGKILLed at random instants, again and again.

Three processes claim and settle in a tight loop on one file; every 100–250 ms one of them is
killed with SIGKILL (often inside a write transaction) and replaced. Afterwards the file passes
``PRAGMA integrity_check``, opens and verifies, every occurrence has succeeded exactly once, and
each occurrence's audit trail is consistent: one claim per attempt, fences strictly increasing,
reclaims exactly where a killed owner's lease expired.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jobledger

WORKER = Path(__file__).with_name("sqlite_kill_worker.py")
OCCURRENCES = 3_000
KILLS = 12
AUTHORITY = {"principal": {"type": "user", "id": "acceptance"}}

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]


def _start(db: Path, owner: str, stop: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), str(db), owner, str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _succeeded(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute(
            "SELECT count(*) FROM occurrences WHERE status = 'succeeded'"
        ).fetchone()[0]
    finally:
        conn.close()


def test_sigkill_at_random_instants_leaves_a_consistent_store(tmp_path):
    db = tmp_path / "store" / "kill.sqlite3"
    with jobledger.open_store(db) as store:
        store.create_job(id="work", kind="work", authority=AUTHORITY, max_attempts=32)
        for index in range(OCCURRENCES):
            store.enqueue_occurrence(job_id="work", scheduled_for=index, trigger_key=f"t{index}")

    stop = tmp_path / "stop"
    rng = random.Random(20261130)
    running: dict[str, subprocess.Popen[bytes]] = {}
    killed: list[str] = []
    finished: list[subprocess.Popen[bytes]] = []
    serial = 0
    try:
        for _ in range(3):
            serial += 1
            running[f"w{serial}"] = _start(db, f"w{serial}", stop)
        time.sleep(0.7)  # let them open the store and get going
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.1, 0.25))
            victim = rng.choice(sorted(running))
            process = running.pop(victim)
            process.send_signal(signal.SIGKILL)
            process.wait(10)
            killed.append(victim)
            serial += 1
            running[f"w{serial}"] = _start(db, f"w{serial}", stop)
        deadline = time.monotonic() + 120
        while _succeeded(db) < OCCURRENCES:
            assert time.monotonic() < deadline, "the survivors did not finish the drain"
            for owner, process in list(running.items()):
                assert process.poll() is None, process.communicate()[0].decode()
            time.sleep(0.1)
    finally:
        stop.write_text("stop")
        for process in running.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
            finished.append(process)
    for process in finished:
        assert process.returncode == 0, process.communicate()[0].decode()

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()

    with jobledger.open_store(db) as store:  # verifies the schema on open
        conn = sqlite3.connect(db)
        ids = [row[0] for row in conn.execute("SELECT occurrence_id FROM occurrences")]
        conn.close()
        assert len(ids) == OCCURRENCES
        reclaims = 0
        for occurrence_id in ids:
            occurrence = store.get_occurrence(occurrence_id)
            assert occurrence.status == "succeeded"
            trail = list(reversed(store.history(occurrence_id=occurrence_id, limit=200)))
            types = [event.type for event in trail]
            assert types[0] == "occurrence_enqueued"
            assert types[-1] == "occurrence_succeeded"
            assert types.count("occurrence_succeeded") == 1
            claims = [e for e in trail if e.type in ("occurrence_claimed", "occurrence_reclaimed")]
            assert len(claims) == occurrence.attempt  # one claim per attempt, none lost
            fences = [e.fence for e in claims]
            assert fences == sorted(set(fences))  # strictly increasing
            assert trail[-1].fence == occurrence.fence == fences[-1]
            assert occurrence.result == {"by": trail[-1].owner_id}
            for claim in claims[1:]:
                assert claim.type == "occurrence_reclaimed"
                assert claim.data["previousOwner"] in killed
                reclaims += 1
        # With twelve kills mid-loop, some leases must have been taken over.
        assert reclaims >= 1
    print(json.dumps({"killed": len(killed), "reclaims": reclaims}))
