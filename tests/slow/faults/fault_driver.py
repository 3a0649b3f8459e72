"""A store in a child process, driven line by line, so faults can be injected into it alone.

Usage: python fault_driver.py TARGET   (then JSON commands on stdin, one per line)

Each command is ``{"op": ..., ...}``; each answer one JSON line on stdout: ``{"ok": true,
"result": ...}`` or ``{"ok": false, "coded": <a SchedulerError?>, "code", "details", "type"}``.
The fault tests run this under the LD_PRELOAD shim (``fault_shim.c``) or on a file system they
fill or remount, and switch the fault on and off between commands.
"""

from __future__ import annotations

import json
import sys
import traceback
import uuid
from collections import Counter
from typing import Any

import jobledger

AUTHORITY = {"principal": {"type": "user", "id": "faults"}}


class Driver:
    def __init__(self, target: str) -> None:
        self.target = target
        self.store: jobledger.Store | None = None

    def op_open(self) -> str:
        self.store = jobledger.open_store(self.target)
        return "open"

    def op_close(self) -> None:
        if self.store is not None:
            self.store.close()
        self.store = None

    def op_create_job(self, job_id: str) -> int:
        assert self.store is not None
        return self.store.create_job(
            id=job_id, kind="work", authority=AUTHORITY, max_attempts=5
        ).revision

    def op_enqueue(self, job_id: str, count: int, size: int = 10) -> int:
        assert self.store is not None
        requests = [
            jobledger.EnqueueRequest(
                job_id=job_id,
                scheduled_for=0,
                trigger_key=f"fault:{uuid.uuid4().hex}",
                payload={"pad": "x" * size, "n": index},
            )
            for index in range(count)
        ]
        return len(self.store.enqueue_batch(requests))

    def op_claim_settle(self, owner: str = "driver") -> str | None:
        assert self.store is not None
        occurrence = self.store.claim_next(owner_id=owner, lease_ms=60_000)
        if occurrence is None:
            return None
        self.store.settle(
            occurrence_id=occurrence.id,
            owner_id=owner,
            fence=occurrence.fence,
            outcome="succeeded",
            result={"fence": occurrence.fence},
        )
        return occurrence.id

    def op_counts(self) -> dict[str, int]:
        assert self.store is not None
        counts: Counter[str] = Counter()
        for item in self.store.count_occurrences():
            counts[item.status] += item.count
        return dict(counts)

    def op_jobs(self) -> list[str]:
        assert self.store is not None
        return [job.id for job in self.store.list_jobs()]

    def op_verify(self) -> bool:
        assert self.store is not None
        return self.store.verify().ok


def main(target: str) -> int:
    driver = Driver(target)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        op = command.pop("op")
        answer: dict[str, Any]
        try:
            answer = {"ok": True, "result": getattr(driver, f"op_{op}")(**command)}
        except jobledger.SchedulerError as exc:
            answer = {
                "ok": False,
                "coded": True,
                "code": exc.code,
                "details": exc.details,
                "message": exc.message,
            }
        except Exception as exc:
            answer = {
                "ok": False,
                "coded": False,
                "type": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if op == "exit":
            break
    driver.op_close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
