"""A worker process for test_postgres_drain: drain one PostgreSQL database, report as JSON.

Usage: python pg_drain_worker.py DATABASE_URL OWNER_ID GO_FILE RESULT_FILE

Opens the store with no injected clock (every instant is the database's), writes
RESULT_FILE.ready, waits for GO_FILE so every process starts together, then loops claim_next /
settle. ``claim_next`` skips rows other workers hold locked, so it returns None only when nothing
unheld is due; the loop stops after a few such answers in a row. Any exception is recorded in the
report and ends the loop; the test fails on it.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import jobledger

LEASE_MS = 120_000  # far longer than the test, so a slow process never loses a lease
EMPTY_ANSWERS_TO_STOP = 3


def main(url: str, owner: str, go_file: str, result_file: str) -> int:
    claimed: list[str] = []
    settled = 0
    errors: list[dict[str, Any]] = []
    started = finished = 0.0
    try:
        with jobledger.open_store(url, listen=False, pool_min_size=1, pool_max_size=1) as store:
            Path(f"{result_file}.ready").write_text("ready")
            deadline = time.monotonic() + 60
            while not Path(go_file).exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never said go")
                time.sleep(0.005)
            started = time.monotonic()
            empty = 0
            while empty < EMPTY_ANSWERS_TO_STOP:
                occurrence = store.claim_next(owner_id=owner, lease_ms=LEASE_MS)
                if occurrence is None:
                    empty += 1
                    time.sleep(0.02)
                    continue
                empty = 0
                claimed.append(occurrence.id)
                store.settle(
                    occurrence_id=occurrence.id,
                    owner_id=owner,
                    fence=occurrence.fence,
                    outcome="succeeded",
                    result={"owner": owner},
                )
                settled += 1
            finished = time.monotonic()
    except BaseException as exc:
        errors.append(
            {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
        )
    Path(result_file).write_text(
        json.dumps(
            {
                "owner": owner,
                "claimed": claimed,
                "settled": settled,
                "errors": errors,
                "seconds": finished - started,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
