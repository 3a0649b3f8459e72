"""How fast real ``Worker`` processes drain one SQLite file: 1 process vs ``--processes``.

Each process runs a :class:`jobledger.Worker` (``--concurrency`` slots, the default runtime:
authorization, the revalidating renew, heartbeats, settles) with a handler that sleeps
``--work-ms`` (0 = returns at once). A watcher thread in each process stops its worker when no
occurrence is left unsettled. Throughput is occurrences per second of wall time, from the
moment all processes are told to start until the last one saw the queue empty.

    python3 bench/worker_drain.py                                  # 4,000; conc 1,8; work 0,2
    python3 bench/worker_drain.py --concurrency 8 --work-ms 0 --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import jobledger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claim_scaling import machine, open_bench_store, populate


def worker_process(
    path: str, owner: str, concurrency: int, work_ms: float, start: Any, results: Any
) -> None:
    store = open_bench_store(Path(path))

    def handler(context: jobledger.JobContext) -> None:
        if work_ms:
            time.sleep(work_ms / 1000)

    runtime = jobledger.Runtime(
        store, handlers={"bench": handler}, authorize=jobledger.allow_all, owner_id=owner
    )
    worker = jobledger.Worker(
        runtime, concurrency=concurrency, poll_interval=timedelta(milliseconds=50)
    )

    def stop_when_drained() -> None:
        with sqlite3.connect(path) as watcher:
            while True:
                time.sleep(0.005)
                left = watcher.execute(
                    "SELECT count(*) FROM occurrences WHERE status != 'succeeded'"
                ).fetchone()[0]
                if left == 0:
                    worker.stop()
                    return

    start.wait()
    began = time.perf_counter()
    threading.Thread(target=stop_when_drained, daemon=True).start()
    summary = worker.run(install_signal_handlers=False)
    results.put(
        {
            "owner": owner,
            "settled": dict(summary.statuses),
            "seconds": time.perf_counter() - began,
        }
    )
    runtime.close()
    store.close()


def measure(
    directory: Path, count: int, processes: int, concurrency: int, work_ms: float
) -> dict[str, Any]:
    path = directory / f"worker-{processes}-{concurrency}.sqlite3"
    populate(path, count)
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    children = [
        context.Process(
            target=worker_process,
            args=(str(path), f"w{index}", concurrency, work_ms, start, results),
        )
        for index in range(processes)
    ]
    for child in children:
        child.start()
    time.sleep(1.5)  # let every process import jobledger and open the store
    start.set()
    reports = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join(timeout=60)
    seconds = max(report["seconds"] for report in reports)
    settled = sum(report["settled"].get("succeeded", 0) for report in reports)
    for suffix in ("", "-wal", "-shm", "-writelock"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {
        "processes": processes,
        "concurrency": concurrency,
        "work_ms": work_ms,
        "occurrences": count,
        "succeeded": settled,
        "per_process": [report["settled"].get("succeeded", 0) for report in reports],
        "seconds": seconds,
        "per_s": count / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drain", type=int, default=4000, help="occurrences per run")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", default="1,8", help="worker slots per process")
    parser.add_argument("--work-ms", default="0,2", help="handler time per occurrence")
    parser.add_argument("--dir", type=Path, default=None, help="where the database files go")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="jobledger-bench-", dir=args.dir))
    rows: list[dict[str, Any]] = []
    print(f"# {machine()}")
    print(
        f"{'work ms':>7} {'slots':>5} {'processes':>9} {'settled':>8} {'seconds':>8} {'per s':>7}"
    )
    try:
        for work_ms in [float(w) for w in args.work_ms.split(",") if w]:
            for concurrency in [int(c) for c in args.concurrency.split(",") if c]:
                for processes in sorted({1, args.processes}):
                    row = measure(base / "db", args.drain, processes, concurrency, work_ms)
                    rows.append(row)
                    print(
                        f"{work_ms:>7g} {concurrency:>5} {processes:>9} {row['succeeded']:>8} "
                        f"{row['seconds']:>8.2f} {row['per_s']:>7.0f}  {row['per_process']}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"machine": machine(), "drain": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
