"""A worker process for test_postgres_kill: a real Worker over a shared app on PostgreSQL.

Usage: python pg_kill_worker.py DATABASE_URL OWNER_ID READY_FILE

The app's handler sleeps a little and returns who ran it. The store uses the database clock
(no clock injected) and LISTEN/NOTIFY. Leases are long (30 s): a killed worker's claims are taken
over because the survivors see its liveness lock (a session advisory lock) free and end its
leases at once (``owner_gone``), not because they expire. Runs until SIGTERM (or SIGKILL).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

import jobledger

LEASE = timedelta(seconds=30)
HANDLER_SECONDS = 0.002


def build_app(url: str, owner: str) -> jobledger.App:
    app = jobledger.App(
        url,
        name="pg-kill-test",
        authorize=jobledger.allow_all,
        store_options={"pool_max_size": 4},
    )

    @app.handler("sleepy")
    def sleepy(ctx: jobledger.JobContext) -> dict[str, str]:
        time.sleep(HANDLER_SECONDS)
        return {"by": owner}

    return app


def main(url: str, owner: str, ready_file: str) -> int:
    with build_app(url, owner) as app:
        worker = app.worker(
            concurrency=2,
            poll_interval=timedelta(milliseconds=100),
            grace_period=timedelta(seconds=5),
            reap_interval=timedelta(milliseconds=250),
            owner_id=owner,
            lease=LEASE,
        )
        Path(ready_file).write_text("ready")
        worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
