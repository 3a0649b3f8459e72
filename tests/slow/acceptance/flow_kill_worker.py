"""A worker process for test_flow_kill: claim and settle flow nodes until told to stop.

Usage: python flow_kill_worker.py TARGET OWNER_ID STOP_FILE EFFECTS_FILE

A claim_next / settle loop with short leases and the real clock (SQLite file or PostgreSQL
URL). ``leaf`` and ``link`` nodes "work" for 0–4 ms and succeed; ``doomed`` ones fail for good
(a dead letter: their children under "cancel" are cancelled); a ``join`` appends one line to
EFFECTS_FILE — its id, its fence and its parents' states as it read them — before it settles,
so the test can check every join ran after all its parents succeeded. A SIGKILL usually lands
while this process holds a lease, and often inside the settle that decides a join's counter.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

import jobledger

LEASE_MS = 1_000


def main(target: str, owner: str, stop_file: str, effects_file: str) -> int:
    stop = Path(stop_file)
    options = {"listen": False} if target.startswith("postgresql://") else {}
    with jobledger.open_store(target, **options) as store:  # type: ignore[arg-type]
        effects = os.open(effects_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        Path(f"{stop_file}.{owner}.ready").touch()  # the harness kills only working processes
        while not stop.exists():
            occurrence = store.claim_next(owner_id=owner, lease_ms=LEASE_MS)
            if occurrence is None:
                time.sleep(0.02)
                continue
            outcome = "succeeded"
            if occurrence.kind == "join":
                parents = store.parent_states(occurrence.id)
                line = {
                    "id": occurrence.id,
                    "fence": occurrence.fence,
                    "owner": owner,
                    "parents": sorted(p.status for p in parents),
                }
                os.write(effects, (json.dumps(line) + "\n").encode())
            elif occurrence.kind == "doomed":
                outcome = "failed"
            else:
                time.sleep(random.uniform(0, 0.004))
            settled = (
                {"outcome": "succeeded", "result": {"by": owner}}
                if outcome == "succeeded"
                else {"outcome": "failed", "error": {"code": "doomed"}, "retryable": False}
            )
            try:
                store.settle(
                    occurrence_id=occurrence.id, owner_id=owner, fence=occurrence.fence, **settled
                )
            except jobledger.SchedulerError as exc:
                if exc.code != "SCHEDULER_LEASE_LOST":  # a slow attempt whose lease expired
                    raise
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))
