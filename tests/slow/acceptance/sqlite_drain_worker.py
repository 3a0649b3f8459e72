"""A worker process for test_sqlite_multiprocess: drain one SQLite file, report as JSON.

Usage: python sqlite_drain_worker.py DB_PATH OWNER_ID GO_FILE RESULT_FILE

Opens the store with the default (system) clock, writes RESULT_FILE.ready, waits until GO_FILE
exists so every process starts together, then loops claim_next / settle until claim_next
returns None. Any exception is recorded in the report and ends the loop; the test fails on it.
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


def main(db_path: str, owner: str, go_file: str, result_file: str) -> int:
    claimed: list[str] = []
    settled = 0
    errors: list[dict[str, Any]] = []
    try:
        with jobledger.open_store(db_path) as store:
            Path(f"{result_file}.ready").write_text("ready")
            deadline = time.monotonic() + 30
            while not Path(go_file).exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never said go")
                time.sleep(0.005)
            while (occurrence := store.claim_next(owner_id=owner, lease_ms=LEASE_MS)) is not None:
                claimed.append(occurrence.id)
                store.settle(
                    occurrence_id=occurrence.id,
                    owner_id=owner,
                    fence=occurrence.fence,
                    outcome="succeeded",
                    result={"owner": owner},
                )
                settled += 1
    except BaseException as exc:
        errors.append(
            {
                "type": type(exc).__name__,
                "code": getattr(exc, "code", None),
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        )
    report = {"owner": owner, "claimed": claimed, "settled": settled, "errors": errors}
    Path(result_file).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))
