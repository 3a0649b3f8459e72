"""What queue limits cost a claim: burn-down with several threads, each with its own store
handle, claiming and settling one occurrence at a time, on one queue that is:

* ``free``        — undeclared (claims take the queue's advisory lock shared on PostgreSQL);
* ``concurrency`` — ``concurrency=64`` (never reached: the cost of the exclusive queue lock,
  which serializes claims of the queue);
* ``worker``      — ``worker_concurrency=64`` (a lock per (queue, owner), shared queue lock);
* ``partition``   — ``partition_concurrency=1`` over 1,000 partitions (staging through
  admission, a lock per partition, promotion on settle).

Claims per second are printed per scenario (median of ``--runs``). On SQLite one writer at a
time serializes every claim anyway; the limits add their counting queries.

    python bench/queue_locks.py                                  # SQLite
    python bench/queue_locks.py --postgres postgresql://postgres@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import jobledger
from jobledger import Queue

AUTHORITY = {"principal": {"type": "user", "id": "bench"}}
SCENARIOS = {
    "free": None,
    "concurrency": Queue("q", concurrency=64),
    "worker": Queue("q", worker_concurrency=64),
    "partition": Queue("q", partition_concurrency=1),
}


def _target(args: argparse.Namespace, scenario: str, run: int) -> str:
    if args.postgres is None:
        return str(Path(tempfile.mkdtemp()) / "bench.sqlite3")
    import psycopg

    name = f"jobledger_bench_queue_locks_{scenario}_{run}"
    with psycopg.connect(args.postgres, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return args.postgres.rsplit("/", 1)[0] + "/" + name


def one_run(args: argparse.Namespace, scenario: str, run: int) -> float:
    target = _target(args, scenario, run)
    with jobledger.open_store(target) as store:
        declared = SCENARIOS[scenario]
        if declared is not None:
            store.declare_queue(declared, actor="bench")
        store.create_job(id="j", kind="k", authority=AUTHORITY, queue="q")
        now = store.now()
        for start in range(0, args.n, 1000):
            store.enqueue_batch(
                [
                    jobledger.EnqueueRequest(
                        job_id="j",
                        scheduled_for=now,
                        trigger_key=f"t{index}",
                        partition=f"p{index % 1000}" if scenario == "partition" else None,
                    )
                    for index in range(start, min(args.n, start + 1000))
                ]
            )
    done = [0] * args.threads

    def work(index: int) -> None:
        with jobledger.open_store(target) as handle:
            owner = f"w{index}"
            while (occurrence := handle.claim_next(owner_id=owner, lease_ms=600_000)) is not None:
                handle.settle(
                    occurrence_id=occurrence.id,
                    owner_id=owner,
                    fence=occurrence.fence,
                    outcome="succeeded",
                )
                done[index] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(args.threads)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    assert sum(done) == args.n, (scenario, sum(done))
    return args.n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", help="a PostgreSQL URL (a database per run is created)")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    store = "postgres" if args.postgres else "sqlite"
    for scenario in SCENARIOS:
        rates = [one_run(args, scenario, run) for run in range(args.runs)]
        print(
            f"{store} {scenario:12s} {statistics.median(rates):8.0f} claims/s "
            f"(runs: {', '.join(f'{rate:.0f}' for rate in rates)}; {args.threads} threads, "
            f"n={args.n})"
        )


if __name__ == "__main__":
    main()
