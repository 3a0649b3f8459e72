"""A worker process for test_adjudicate_kill: runs one occurrence of the ``charge`` kind, whose
handler records its start and then blocks until the test SIGKILLs the process mid-run.

Usage: python adjudicate_kill_worker.py TARGET START_MS CALLS_FILE [CONCURRENCY]

With CONCURRENCY it runs a real worker instead (``app.run_worker``, that many slots, the default
adaptive prefetch): it claims ahead of its slots, so claims wait in its buffer when it is killed.

The process runs on a FakeClock at START_MS, so the lease it takes has a known expiry that the
test's own clock can pass without waiting.
"""

from __future__ import annotations

import os
import sys
import time

import jobledger
from jobledger.testing import FakeClock, run_until_idle


def main(target: str, start_ms: str, calls_file: str, concurrency: str | None = None) -> int:
    app = jobledger.App(target, clock=FakeClock(int(start_ms)), authorize=jobledger.allow_all)

    @app.handler("charge", on_lost_lease="adjudicate")
    def charge(ctx: jobledger.JobContext) -> None:
        with open(calls_file, "a", encoding="utf-8") as calls:
            calls.write(f"{ctx.occurrence.id} {os.getpid()}\n")
            calls.flush()
            os.fsync(calls.fileno())
        while True:  # "calling the payment provider" until killed
            time.sleep(1)

    if concurrency is not None:
        app.run_worker(concurrency=int(concurrency), planner=False)
        return 1  # never reached: killed
    run_until_idle(app, limit=1)
    return 1  # never reached unless nothing was claimable


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:5]))
