"""The start rate of a limited queue: does a freed slot start the next occurrence at once?

The queue of issue 32 (item 2): ``emails`` with ``concurrency=2, rate=Rate(5, 1 s)`` and
handlers that take 0.3 s, so at most ``min(rate, concurrency / handler time) = min(5, 6.7) = 5``
starts a second. A backlog larger than the run is enqueued, workers with the default poll
interval (1 s) run for ``--seconds``, and each handler notes when it started. Reported per store
and worker count: starts per second between the end of the warm-up and the end of the run, and
that rate over the target (``--workers 2``: two workers on two store handles, so one learns of
the other's settles only as another process would — LISTEN/NOTIFY, SQLite's wake file).

    python bench/limited_queue_rate.py               # SQLite and PostgreSQL, 1 and 2 workers
    python bench/limited_queue_rate.py --seconds 10 --stores sqlite --workers 1
    python bench/limited_queue_rate.py --postgres postgresql://postgres@127.0.0.1:5432/test

SQLite works in a temporary directory; PostgreSQL in a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

import jobledger

CONCURRENCY = 2
HANDLER_S = 0.3


def run(
    target: str,
    store_options: dict[str, Any],
    workers: int,
    seconds: float,
    warmup: float,
    rate_limit: int,
) -> dict[str, float]:
    goal = min(rate_limit, CONCURRENCY / HANDLER_S)
    starts: list[float] = []
    lock = threading.Lock()

    def send(ctx: jobledger.JobContext) -> None:
        with lock:
            starts.append(time.monotonic())
        time.sleep(HANDLER_S)

    apps = [
        jobledger.App(
            target, name=f"bench-{n}", authorize=jobledger.allow_all, store_options=store_options
        )
        for n in range(workers)
    ]
    for app in apps:
        app.handler("send")(send)
    first = apps[0]
    first.queue(
        "emails", concurrency=CONCURRENCY, rate=jobledger.Rate(rate_limit, timedelta(seconds=1))
    )
    first.ensure_job("send", "send", queue="emails")
    backlog = int((seconds + warmup) * goal * 1.5) + 10
    for n in range(backlog):
        first.enqueue("send", payload={"n": n})
    running = [app.worker(concurrency=CONCURRENCY, planner=False) for app in apps]
    threads = [
        threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False}, daemon=True)
        for worker in running
    ]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(warmup + seconds)
    for worker in running:
        worker.stop()
    for thread in threads:
        thread.join(30)
    for app in apps:
        app.close()
    counted = [t for t in starts if began + warmup <= t < began + warmup + seconds]
    rate = len(counted) / seconds
    return {"starts_per_s": round(rate, 2), "of_target": round(rate / goal, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--rate", type=int, default=5, help="the queue's rate, per second")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for store in args.stores.split(","):
        for workers in [int(n) for n in args.workers.split(",")]:
            timing = (workers, args.seconds, args.warmup, args.rate)
            if store == "sqlite":
                with tempfile.TemporaryDirectory() as directory:
                    figures = run(str(Path(directory) / "jobs.sqlite3"), {}, *timing)
            else:
                schema = f"bench_{uuid.uuid4().hex[:12]}"
                try:
                    figures = run(args.postgres, {"schema": schema}, *timing)
                finally:
                    with psycopg.connect(args.postgres, autocommit=True) as conn:
                        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            goal = round(min(args.rate, CONCURRENCY / HANDLER_S), 2)
            row = {"store": store, "workers": workers, "rate": args.rate, "target_per_s": goal}
            row.update(figures)
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json is not None:
        args.json.write_text("\n".join(json.dumps(row) for row in results) + "\n")


if __name__ == "__main__":
    main()
