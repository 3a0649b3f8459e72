"""A worker process for test_sqlite_kill: claim and settle on one SQLite file until told to stop.

Usage: python sqlite_kill_worker.py DB_PATH OWNER_ID STOP_FILE

Runs a claim_next / settle loop with short leases and the real clock; between claim and settle
it "works" for 0–4 ms, so a SIGKILL usually lands while it holds a lease, and sometimes inside
a write transaction. Idles briefly when nothing is claimable (expired
leases of killed workers become claimable after LEASE_MS). Exits when STOP_FILE exists.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import jobledger

LEASE_MS = 1_000


def main(db_path: str, owner: str, stop_file: str) -> int:
    stop = Path(stop_file)
    with jobledger.open_store(db_path) as store:
        while not stop.exists():
            occurrence = store.claim_next(owner_id=owner, lease_ms=LEASE_MS)
            if occurrence is None:
                time.sleep(0.02)
                continue
            time.sleep(random.uniform(0, 0.004))
            store.settle(
                occurrence_id=occurrence.id,
                owner_id=owner,
                fence=occurrence.fence,
                outcome="succeeded",
                result={"by": owner},
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:4]))
