"""A crash with prefetched claims loses nothing (issue 10's crash cost, issue 12's fast recovery).

A worker with ``prefetch=100`` and one slot claims 101 occurrences; its one handler hangs, so
100 claims sit in its buffer, claimed but never started. It is SIGKILLed. A second worker then
takes everything over, and every occurrence succeeds exactly once in storage:

* ``reaped`` — the victim's liveness lock (an ``flock`` beside the SQLite file, a session
  advisory lock on PostgreSQL) is free, so the survivor ends its leases at once (reason
  ``owner_gone``: ``occurrence_lease_expired`` for the started claim, ``occurrence_released``
  for the buffered ones, given back without spending an attempt): taken over within seconds
  although the lease is 60 s.
* ``unknown_owner`` — the victim's liveness record is gone (its lock file deleted; on
  PostgreSQL its ``jobledger_workers`` row), so nobody can tell it is dead: the survivor waits
  for the (4 s) leases to expire, then reclaims them. Nothing is lost either way; only the wait
  differs.

The buffered claims were never started by the victim, so they run exactly once in total; only the
occurrence whose handler was running at the kill runs twice (at-least-once), and it settles once.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import jobledger

WORKER = Path(__file__).with_name("chaos_worker.py")
OCCURRENCES = 150
PREFETCH = 100

pytestmark = [pytest.mark.acceptance, pytest.mark.xdist_group("acceptance")]


def _spawn(tmp_path: Path, target: str, owner: str, **settings: Any) -> subprocess.Popen[bytes]:
    config = {
        "target": target,
        "owner": owner,
        "effects": str(tmp_path / "effects.jsonl"),
        "planner": False,
        "schedules": False,
        "concurrency": 1,
        "prefetch": 16,
        "lease_s": 60,
        "reap_s": 0.5,
        "poll_s": 0.2,
        "summary": str(tmp_path / f"{owner}.summary.json"),
        "ready": str(tmp_path / f"{owner}.ready"),
        **settings,
    }
    log = (tmp_path / f"{owner}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(config)], stdout=log, stderr=subprocess.STDOUT
    )


def _wait(predicate, timeout_s: float, what: str) -> float:
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic() - began


def _statuses(store: jobledger.Store) -> Counter[str]:
    return Counter({c.status: c.count for c in store.count_occurrences()})


def _held_by(store: jobledger.Store, owner: str) -> int:
    return sum(h.leases for h in store.lease_holders() if h.owner_id == owner)


def _forget_owner(target: str, owner: str) -> None:
    """Make the dead owner unknowable: its liveness record is gone."""
    if target.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("DELETE FROM jobledger.jobledger_workers WHERE worker_id = %s", (owner,))
        return
    digest = hashlib.sha256(owner.encode()).hexdigest()[:32]
    lock = Path(f"{target}-owners") / f"{digest}.lock"
    assert lock.exists(), "the victim held no liveness lock file"
    lock.unlink()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["reaped", "unknown_owner"])
def test_a_crash_with_prefetched_claims_loses_nothing(backend, mode, tmp_path, request):
    if backend == "sqlite":
        target = str(tmp_path / "db" / "prefetch.sqlite3")
    else:
        target = request.getfixturevalue("postgres_database_url")
    lease_s = 60 if mode == "reaped" else 4
    with jobledger.App(target, name="prefetch", authorize=jobledger.allow_all) as app:
        app.ensure_job("work", "work", max_attempts=5)
        ids = [o.id for o in app.enqueue_many("work", [{"ms": 1}] * OCCURRENCES)]
        store = app.store

        victim = _spawn(tmp_path, target, "victim", prefetch=PREFETCH, block_s=120, lease_s=lease_s)
        survivor = None
        try:
            _wait(lambda: _held_by(store, "victim") == PREFETCH + 1, 60, "the victim's claims")
            effects_file = tmp_path / "effects.jsonl"
            _wait(lambda: b'"start"' in effects_file.read_bytes(), 30, "the victim's handler")
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            killed = time.monotonic()
            if mode == "unknown_owner":
                _forget_owner(target, "victim")
            survivor = _spawn(tmp_path, target, "survivor", concurrency=4, lease_s=60)
            taken_over = _wait(
                lambda: _held_by(store, "victim") == 0, 90, "the victim's leases to end"
            )
            _wait(lambda: _statuses(store) == {"succeeded": OCCURRENCES}, 90, "the drain")
            drained = time.monotonic() - killed
        finally:
            for process in (victim, survivor):
                if process is not None and process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    try:
                        process.wait(30)
                    except subprocess.TimeoutExpired:
                        process.kill()
        assert survivor.returncode == 0, (tmp_path / "survivor.log").read_text()

        # Exactly once in storage: one success per occurrence, at its final fence.
        for occurrence_id in ids:
            occurrence = store.get_occurrence(occurrence_id)
            trail = store.history(occurrence_id=occurrence_id, limit=200)
            succeeded = [e for e in trail if e.type == "occurrence_succeeded"]
            assert occurrence.status == "succeeded"
            assert [(e.owner_id, e.fence) for e in succeeded] == [("survivor", occurrence.fence)]
            # a started claim's lease is ended; a claim buffered ahead of the slot, whose
            # handler never began, is given back (occurrence_released, no attempt spent)
            ended = [
                (e.owner_id, e.data["reason"])
                for e in trail
                if e.type in ("occurrence_lease_expired", "occurrence_released")
            ]
            claimed_by_victim = any(
                e.type in ("occurrence_claimed", "occurrence_reclaimed") and e.owner_id == "victim"
                for e in trail
            )
            if claimed_by_victim and mode == "reaped":
                assert ended == [("victim", "owner_gone")]
            else:
                # unknown owner: nobody ended its leases; they expired (never-started claims
                # are given back when found expired)
                assert all(reason == "lease_expired" for _, reason in ended), ended
    effects = [json.loads(line) for line in (tmp_path / "effects.jsonl").read_text().splitlines()]
    victim_started = {e["occ"] for e in effects if e["owner"] == "victim"}
    ends = Counter(e["occ"] for e in effects if e["e"] == "end")
    assert len(victim_started) == 1, "the victim had one slot: one handler started"
    assert set(ends) == set(ids) and set(ends.values()) == {1}, "each side effect exactly once"
    print(
        json.dumps(
            {
                "backend": backend,
                "mode": mode,
                "buffered_at_kill": PREFETCH,
                "lease_s": lease_s,
                "kill_to_leases_ended_s": round(taken_over, 2),
                "kill_to_all_succeeded_s": round(drained, 2),
            }
        )
    )
    if mode == "reaped":
        assert taken_over < 15, f"took {taken_over:.1f} s: the dead owner was not reaped"
    else:
        assert taken_over >= 1.0, "an unknown owner's leases ended before they expired"
    if backend == "sqlite":
        conn = sqlite3.connect(target)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()
